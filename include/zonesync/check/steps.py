"""The steps of a consistency check around its Spark job (docs/consistency-check.md):

    preflight -> record_start -> check (Spark, then Great Expectations) -> repair -> finish

Each re-reads the run from meta: a retried step finds what the last attempt decided.
The start is written once: the cut first, then every zone's binlog position, so every
write whose version is at or below the cut committed before the positions were read
(a guarded transaction commits within the rules' 2 s deadline of taking its versions;
CUT_GRACE_US adds a second for clocks), and is applied everywhere once every zone has
applied every other zone up to those positions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from zonesync.capture.binlog import binlog_end
from zonesync.check import repair as check_repair
from zonesync.check.request import CheckRefused, CheckRequest
from zonesync.check.store import DIFFERENCES, FAILED, RUNNING, SUCCEEDED, Check, CheckStore
from zonesync.copy import chunks
from zonesync.meta import alerts
from zonesync.meta.db import MetaConfig
from zonesync.meta.store import MetaStore

APP_DB = "zonesync_app"
CUT_GRACE_US = 3_000_000


@dataclass
class CheckContext:
    meta: MetaConfig
    run_id: str
    request: CheckRequest
    zone_conn: Callable  # zone name -> a new DB-API connection to its app database
    actor: str = "airflow"
    app_db: str = APP_DB

    @property
    def store(self) -> CheckStore:
        return CheckStore(self.meta)

    def run(self) -> Check:
        return self.store.require(self.run_id)


def _with(ctx: CheckContext, zone: str, fn):
    conn = ctx.zone_conn(zone)
    try:
        return fn(conn)
    finally:
        conn.close()


def preflight(ctx: CheckContext) -> Check:
    """The request against the mesh and every zone's tables; the run's row. Refusals
    change nothing."""
    found = MetaStore(ctx.meta).rules_at()
    req = ctx.request.resolved(MetaStore(ctx.meta).zones(), found[1].tables if found else {})
    for zone in req.zones:
        for t in req.tables:
            key = _with(ctx, zone, lambda conn, t=t: chunks.key_columns(conn, ctx.app_db, t))
            if not key:
                raise CheckRefused(f"tables: {t} is missing in zone {zone} or has no primary key; create it there")
            odd = [f"{c} ({ty})" for c, ty in key if ty not in chunks.INTEGER_TYPES]
            if odd:
                raise CheckRefused(f"tables: {t}'s primary key has non-integer columns {', '.join(odd)}; the check "
                                   "chunks by integer keys only (docs/consistency-check.md)")  # fmt: skip
    return ctx.store.create(ctx.run_id, req.zones, req.tables, req.chunk_rows, req.rows, req.repair, req.reason,
                            ctx.actor, req.zsids, req.exclude_origin, req.entities)  # fmt: skip


def record_start(ctx: CheckContext, cut_us: int | None = None, rules_version: int | None = None) -> Check:
    """The cut (`cut_us`, else now less CUT_GRACE_US), every zone's binlog position and the
    rules version whose owners are right (`rules_version`, else the head), written once."""
    run = ctx.run()
    if run.start_json is None:
        cut = int(time.time() * 1_000_000) - CUT_GRACE_US if cut_us is None else int(cut_us)
        positions = {z: list(_with(ctx, z, binlog_end) or ("", 0)) for z in run.zones}
        if rules_version is None:
            found = MetaStore(ctx.meta).rules_at()
            rules_version = found[0] if found else 0
        run = ctx.store.set_start(ctx.run_id, rules_version, cut, positions)
    ctx.store.phase(ctx.run_id, "started")
    return run


def repair(ctx: CheckContext) -> dict[str, int]:
    """With repair on, every differing row set to its owner's row where a zone has it
    wrong (zonesync.check.repair); the outcomes counted. With it off, nothing."""
    run = ctx.run()
    if not run.repair:
        return {}
    ctx.store.phase(ctx.run_id, "repair")
    return check_repair.repair(ctx.store, ctx.run_id, ctx.zone_conn, ctx.app_db)


def differences(ctx: CheckContext, limit: int = 1000) -> tuple[int, list[str]]:
    """(how many rows differ, one line per differing row for the first `limit`: its table
    and key, each zone's differing columns or what it lacks): what a restricted check's
    caller (a switch's or a migration's verify) reports."""
    store = CheckStore(ctx.meta)
    lines = [f"{d['table']}{d['key']}: " + "; ".join(f"{z} {w if isinstance(w, str) else ', '.join(w)}"
                                                    for z, w in sorted(d["zones"].items()))
             for d in store.diffs(ctx.run_id, limit=limit)]  # fmt: skip
    return store.diff_counts(ctx.run_id)[0], lines


def finish(ctx: CheckContext, result: dict) -> Check:
    """The run's outcome from the job's result ({"tables", "expectations"}): succeeded when
    every chunk of every table matched (or differed only by writes in flight) and the
    Great Expectations suite passed; differences otherwise (with an alert); failed when a
    table could not be checked whole."""
    tables, expectations = result["tables"], result.get("expectations") or {}
    mismatched = {t: r["outcome"]["by_status"].get("mismatch", 0) for t, r in tables.items()}
    schema = {t: r["outcome"]["schema"] for t, r in tables.items() if r["outcome"].get("schema")}
    incomplete = [t for t, r in tables.items() if not r["outcome"]["complete"] and t not in schema]
    if incomplete:
        return ctx.store.finish(ctx.run_id, FAILED, f"not checked whole: {', '.join(incomplete)}")
    failed = [f"{f['expectation']}({f['column']}): {f['unexpected']}" for f in expectations.get("failed", [])]
    counts = reconcile_counts(ctx)
    ctx.store.set_summary(ctx.run_id, {**tables, "_expectations": expectations, "_reconcile": counts})
    miscounted = sorted(pair for pair, c in counts.items() if c["mismatch"])
    if any(mismatched.values()) or schema or failed or miscounted:
        diffs, repaired = ctx.store.diff_counts(ctx.run_id)
        parts = [f"{t}: {n} chunks differ" for t, n in mismatched.items() if n] + list(schema.values())
        if failed:
            parts.append(f"expectations failed: {', '.join(failed)}")
        if miscounted:
            parts.append(f"event counts differ: {', '.join(miscounted)} (`zonesync reconcile`)")
        alerts.record(ctx.meta, "*", "consistency_mismatch",
                      {"run_id": ctx.run_id, "rows": diffs, "tables": mismatched, "schema": schema,
                       "expectations": failed, "data_docs": expectations.get("data_docs")})  # fmt: skip
        if ctx.run().repair:
            parts.insert(0, f"{repaired} of them repaired (`zonesync check report {ctx.run_id}`)")
        return ctx.store.finish(ctx.run_id, DIFFERENCES, f"{diffs} rows differ; " + "; ".join(parts))
    return ctx.store.finish(ctx.run_id, SUCCEEDED, "every zone holds the same rows; expectations passed")


def reconcile_counts(ctx: CheckContext) -> dict:
    """Seed S002-10 in the report: per source -> target pair of the checked zones, the
    partitions whose published and committed event counts were compared (ok), differ
    (mismatch: alerted as count_mismatch) or are not comparable now (in flight)."""
    from zonesync.apply.tools.reconcile import MISMATCH, OK, alert_differences, reconcile

    zones = ctx.run().zones
    out: dict[str, dict] = {}
    for target in zones:
        sources = [z for z in zones if z != target]
        rows = _with(ctx, target, lambda conn, sources=sources: reconcile(ctx.meta, conn, sources))
        alert_differences(ctx.meta, target, rows)
        for r in rows:
            c = out.setdefault(f"{r.source}->{target}", {"partitions": 0, "ok": 0, "mismatch": 0, "not_comparable": 0,
                                                         "published": 0, "committed": 0})  # fmt: skip
            c["partitions"] += 1
            c["ok" if r.status == OK else "mismatch" if r.status == MISMATCH else "not_comparable"] += 1
            if r.status in (OK, MISMATCH):
                c["published"] += r.published or 0
                c["committed"] += r.committed
    return out


def fail(ctx: CheckContext, why: str) -> Check:
    run = ctx.store.get(ctx.run_id)
    if run is None or run.status != RUNNING:
        return run
    return ctx.store.finish(ctx.run_id, FAILED, why)
