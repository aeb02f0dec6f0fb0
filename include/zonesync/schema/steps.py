"""The schema_change DAG's steps: one DDL statement into every zone, then the holds it
caused drained (docs/schema-changes.md).

    preflight -> apply (one task per zone, in the request's order) -> verify -> resume
    report (all done): which zones have the change, and the run's end

- preflight: the statement is one ALTER TABLE / CREATE INDEX / DROP INDEX on a table every
  zone has; replication lag is below the limit; and the definition the table will have is
  learnt by running the statement on an empty copy of the table in the bookkeeping schema
  (zonesync.ddl_scratch_*), in the first zone where it runs (a zone already changed by an
  earlier, failed run refuses it). Nothing of the application is touched.
- apply(zone): idempotent. A zone whose table already has that definition is skipped;
  otherwise, once the zone's appliers have applied what the zones already changed wrote
  up to now, the statement runs there (logged: the zone's replicator records it, and the
  zone's own replicas follow), and the table must then have that definition.
- verify: every zone's table has it.
- resume: every hold of the table (apply/batch/table_holds.py: the zones whose appliers met
  events of the other shape while the zones differed) set draining.
- report: each zone changed or not, so that a failed run says where the change is.

A failure leaves the zones already changed as they are (DDL does not roll back); report
lists them and resume does not run. Running the same request again goes on from there.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import pymysql

from zonesync.apply.batch import table_holds
from zonesync.apply.tools.progress import wait_applied
from zonesync.capture.binlog import binlog_end
from zonesync.capture.ddl import retarget, table_changed
from zonesync.meta.store import MetaStore
from zonesync.schema import definitions

_ALLOWED_HEAD = re.compile(
    r"^\s*(ALTER\s+(ONLINE\s+)?(IGNORE\s+)?TABLE|CREATE\s+(UNIQUE\s+)?INDEX|DROP\s+INDEX)\s", re.IGNORECASE
)
SCRATCH_PREFIX = "ddl_scratch_"
# lock wait timeout, deadlock, lost or refused connections: the task's retry may pass
TRANSIENT = frozenset({1205, 1213, 2003, 2006, 2013})
APPLIED_WAIT_S = 120.0  # a zone's appliers catch up with the zones already changed within this


class SchemaChangeRefused(ValueError):
    """A request or a state that the change cannot go on from: "field: why" or "step: why"."""


@dataclass(frozen=True)
class SchemaChangeRequest:
    statement: str
    zones: tuple[str, ...]
    reason: str
    max_lag_s: float = 5.0

    def table(self, app_schema: str) -> str:
        """The table the statement changes; SchemaChangeRefused names what is wrong."""
        sql = self.statement.strip().rstrip(";").strip()
        if not sql:
            raise SchemaChangeRefused("sql: empty: give one ALTER TABLE, CREATE INDEX or DROP INDEX statement")
        if ";" in _outside_quotes(sql):
            raise SchemaChangeRefused("sql: more than one statement: give one per run")
        if not _ALLOWED_HEAD.match(sql):
            raise SchemaChangeRefused("sql: only ALTER TABLE, CREATE INDEX and DROP INDEX are rolled through zones "
                                      "(create, drop or rename a table in every zone by hand)")  # fmt: skip
        changed = table_changed(sql, app_schema)
        if changed is None or changed[0] != app_schema:
            raise SchemaChangeRefused(f"sql: the statement must change a table of the application schema "
                                      f"{app_schema}")  # fmt: skip
        return changed[1]


def _outside_quotes(sql: str) -> str:
    """The statement with quoted strings and names blanked (a ';' inside them is not a second one)."""
    return re.sub(r"'(?:[^'\\]|\\.|'')*'|`(?:[^`]|``)*`|\"(?:[^\"\\]|\\.)*\"", "''", sql)


@dataclass
class SchemaChangeContext:
    """What a step needs: meta, the run, the request, and zone name -> a new connection to
    its application schema (not autocommit)."""

    meta: object
    run_id: str
    request: SchemaChangeRequest
    zone_conn: Callable[[str], object]
    app_schema: str = "zonesync_app"


def _definition(ctx: SchemaChangeContext, zone: str, table: str) -> definitions.Table | None:
    conn = ctx.zone_conn(zone)
    try:
        return definitions.read(conn, [table]).get(table)
    finally:
        conn.close()


def wanted_definition(ctx: SchemaChangeContext, zone: str, table: str) -> definitions.Table:
    """The table's definition after the statement, learnt on an empty copy of zone's table
    in the bookkeeping schema (dropped again, whatever happens)."""
    scratch = f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}"
    conn = ctx.zone_conn(zone)
    try:
        with conn.cursor() as cur:
            # (logged: the replicators read only the application schema; a zone's own
            # replicas create and drop it too)
            cur.execute(f"CREATE TABLE zonesync.`{scratch}` LIKE `{ctx.app_schema}`.`{table}`")
            try:
                cur.execute(retarget(ctx.request.statement.strip().rstrip(";"), f"zonesync.`{scratch}`"))
                cur.execute("USE zonesync")
                found = definitions.read(conn, [scratch])[scratch]
            finally:
                cur.execute(f"DROP TABLE IF EXISTS zonesync.`{scratch}`")
        return found
    finally:
        conn.close()


def resolve_zones(ctx: SchemaChangeContext) -> tuple[str, ...]:
    """The request's zones, or every zone in id order; an unknown one refused."""
    known = sorted(MetaStore(ctx.meta).zones().items(), key=lambda item: item[1])
    names = [name for name, _ in known]
    if not ctx.request.zones:
        return tuple(names)
    unknown = [z for z in ctx.request.zones if z not in names]
    if unknown:
        raise SchemaChangeRefused(f"zones: unknown zone {unknown[0]!r}: one of {', '.join(names)}")
    return ctx.request.zones


def preflight(ctx: SchemaChangeContext, lag_of: Callable[[tuple[str, ...]], float]) -> dict:
    """The table, the zones, and the definition wanted (JSON for the next tasks)."""
    table = ctx.request.table(ctx.app_schema)
    req = ctx.request = replace(ctx.request, zones=resolve_zones(ctx))
    now = {zone: _definition(ctx, zone, table) for zone in req.zones}
    missing = [z for z, t in now.items() if t is None]
    if missing:
        raise SchemaChangeRefused(f"preflight: table {table} is missing in zone(s) {', '.join(missing)}")
    lag = lag_of(req.zones)
    if lag > req.max_lag_s:
        raise SchemaChangeRefused(f"preflight: replication lags {lag:.1f} s (max_lag_s {req.max_lag_s}): "
                                  "let it catch up, or raise max_lag_s")  # fmt: skip
    errors = []
    for zone in req.zones:
        try:
            wanted, base = wanted_definition(ctx, zone, table), now[zone]
            break
        except Exception as exc:  # noqa: BLE001 - the statement refused here: this zone may have it already
            errors.append(f"zone {zone}: {exc}")
    else:
        shapes = [t for i, t in enumerate(now.values()) if t not in list(now.values())[:i]]
        if len(shapes) != 1:
            refusals = "; ".join(errors)
            raise SchemaChangeRefused(f"preflight: the statement runs in no zone's copy of {table}: {refusals}")
        wanted = base = shapes[0]  # every zone has it already: a run that is done
    # Each zone has the table as it was before (the copy's zone) or as it will be (an
    # earlier run changed it): any other shape is a difference this change would keep.
    odd = [z for z, t in now.items() if t not in (base, wanted)]
    if odd:
        raise SchemaChangeRefused(
            f"preflight: {table} in zone(s) {', '.join(odd)} differs from both its shape before and after the "
            "change: make the zones agree first (zonesync schema diff)"
        )
    return {"table": table, "zones": list(req.zones), "wanted": definitions.to_json(wanted)}


def apply(ctx: SchemaChangeContext, zone: str, table: str, wanted_json: dict) -> str:
    """'already' or 'applied'; SchemaChangeRefused if the zone's table ends another shape.

    Before the statement runs here, this zone's appliers must have applied everything the
    zones already changed wrote up to now (their DDL included): their rows of the old
    shape fit this table only until it changes. (Their rows of the new shape are parked
    here meanwhile, held: table_holds.py.)"""
    wanted = definitions.from_json(wanted_json)
    if _definition(ctx, zone, table) == wanted:
        return "already"
    _wait_for_changed_zones(ctx, zone, table, wanted)
    conn = ctx.zone_conn(zone)
    try:
        with conn.cursor() as cur:
            cur.execute(f"USE `{ctx.app_schema}`")
            cur.execute(ctx.request.statement.strip().rstrip(";"))
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in TRANSIENT:
            raise  # retried by the task
        raise SchemaChangeRefused(f"apply: zone {zone} refused it: {exc.args[-1]}") from exc
    finally:
        conn.close()
    got = _definition(ctx, zone, table)
    if got != wanted:
        lines = definitions.diff({"wanted": {table: wanted}, zone: {table: got}})
        raise SchemaChangeRefused(f"apply: zone {zone}: the statement ran, but {table} is not as expected: "
                                  f"{'; '.join(lines)}")  # fmt: skip
    return "applied"


def _wait_for_changed_zones(ctx: SchemaChangeContext, zone: str, table: str, wanted) -> None:
    for other in ctx.request.zones:
        if other == zone or _definition(ctx, other, table) != wanted:
            continue
        source = ctx.zone_conn(other)
        try:
            position = binlog_end(source)
        finally:
            source.close()
        if position is None:
            continue  # no binary log there: nothing of it is replicated
        target = ctx.zone_conn(zone)
        try:
            done = wait_applied(ctx.meta, target, other, position, APPLIED_WAIT_S)
        finally:
            target.close()
        if not done:
            raise SchemaChangeRefused(
                f"apply: zone {zone}'s appliers have not applied zone {other}'s changes up to {position[0]}:"
                f"{position[1]} (its {table} changed) within {APPLIED_WAIT_S:.0f} s: is replication running? "
                "(zonesync lag); nothing was changed in zone " + zone
            )


def changed_zones(ctx: SchemaChangeContext, table: str, wanted_json: dict) -> dict[str, bool]:
    """zone -> whether its table has the wanted definition."""
    wanted = definitions.from_json(wanted_json)
    return {zone: _definition(ctx, zone, table) == wanted for zone in ctx.request.zones}


def verify(ctx: SchemaChangeContext, table: str, wanted_json: dict) -> None:
    behind = [z for z, done in changed_zones(ctx, table, wanted_json).items() if not done]
    if behind:
        raise SchemaChangeRefused(f"verify: {table} differs in zone(s) {', '.join(behind)} (zonesync schema diff)")


def resume(ctx: SchemaChangeContext, table: str) -> list[str]:
    """The zones where a hold of the table was set draining."""
    resumed = []
    for zone in ctx.request.zones:
        conn = ctx.zone_conn(zone)
        try:
            if table_holds.resume(conn, table):
                resumed.append(zone)
        finally:
            conn.close()
    return resumed
