"""A table declared resident after it was replicated, made resident in fact
(docs/migration.md, "Declaring an existing table resident"; issue 22).

While the mesh replicated it, every zone held every row. Once the rules declare it
`resident: true` the appliers stop replicating it, but each zone still holds the other
units' rows. `zonesync resident purge` deletes, in each zone, the rows whose entity is
registered in another unit, the way a migration's release purges its source
(migrate/resident.py `purge`: skip_replication, no tombstones, key-range chunks):

- rows of entities registered in this zone stay; rows of entities registered nowhere stay
  too (their unit is unknown: they are counted and reported, never deleted);
- an entity's rows go only when its owner zone holds at least as many of them (it is
  read first): a purge never deletes the only copy. An owner short of rows (or
  unreachable) keeps this zone's rows, is reported, and the command exits 1;
- refused while the table is not resident in the newest rules, and while a migration of
  an entity of the table's entity type runs (its rows are in flight). Each chunk reads
  the zone's admits under the admits' head lock (apply/batch/resident.py), so a migration
  admitting one of the entities here meanwhile stops the purge before it deletes a row
  the migration brings.

Idempotent: every run recomputes from what the zones hold now, so a re-run after a kill
finishes the job, and one after a complete run deletes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from zonesync.apply.batch.resident import HEAD
from zonesync.check.sql import entity_predicate
from zonesync.meta.store import MetaStore, audit, default_actor
from zonesync.migrate import resident
from zonesync.migrate.store import MigrationStore
from zonesync.rules.model import TableSpec
from zonesync.sql_names import quote

IDS_PER_STATEMENT = 500  # entity ids in one IN list (registry look-ups, owner counts, deletes)


class PurgeRefused(ValueError):
    """Nothing was changed: "field: why, and the fix"."""


class PurgeStopped(RuntimeError):
    """Stopped part-way (a migration admitted an entity meanwhile): a re-run resumes."""


@dataclass
class ZonePurge:
    """What one zone holds of the table, by the entities' units, and what went."""

    zone: str
    own: int = 0  # rows of entities registered in this zone (they stay)
    going: dict[str, dict[str, int]] = field(default_factory=dict)  # owner zone -> {entity id: rows here}
    short: list[tuple[str, str, int, int | None]] = field(default_factory=list)  # (id, owner, here, at owner)
    unregistered: dict[str | None, int] = field(default_factory=dict)  # entity id (None: NULL) -> rows
    deleted: dict[str, int] = field(default_factory=dict)  # owner zone -> rows deleted


@dataclass
class Plan:
    table: str
    spec: TableSpec
    version: int
    zones: list[str]  # the zones purged
    known: list[str]  # every zone of the meta store


def _id(value) -> str | None:
    """A column value as the registry spells the entity id (7 and Decimal('7') as '7')."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return str(int(value))
    return str(value)


def _chunks(items: list, n: int = IDS_PER_STATEMENT):
    for i in range(0, len(items), n):
        yield items[i : i + n]


def prepare(meta, table: str | None, zones: list[str], reason: str | None, dry_run: bool) -> Plan:
    """The request checked against meta (PurgeRefused naming the flag and the fix)."""
    if not table:
        raise PurgeRefused("--table: required: the resident table to purge, e.g. --table notes")
    if not dry_run and not (reason or "").strip():
        raise PurgeRefused("--reason: required: say why (kept in the audit log), e.g. --reason 'notes made "
                           "resident (issue 22)'; or --dry-run to see what would go")  # fmt: skip
    store = MetaStore(meta)
    found = store.rules_at()
    if found is None:
        raise PurgeRefused("--table: no rules are published yet: `zonesync rules apply FILE --reason ...`")
    version, rules = found
    spec = rules.tables.get(table)
    if spec is None:
        names = ", ".join(sorted(rules.resident_tables())) or "none"
        raise PurgeRefused(f"--table: {table!r} is not a table of the newest rules (version {version}); resident "
                           f"tables: {names}")  # fmt: skip
    if not spec.resident or spec.entity is None:
        raise PurgeRefused(f"--table: {table} is not resident in the newest rules (version {version}): publish rules "
                           "declaring it `resident: true` first (docs/migration.md, Resident tables)")  # fmt: skip
    ids = store.zones()
    known = sorted(ids, key=ids.get)
    unknown = [z for z in zones if z not in ids]
    if unknown:
        raise PurgeRefused(f"--zone: unknown zone {unknown[0]!r} (zones: {', '.join(known)})")
    refuse_migrations(meta, spec)
    return Plan(table, spec, version, [z for z in known if z in zones] if zones else known, known)


def refuse_migrations(meta, spec: TableSpec) -> None:
    """PurgeRefused while a migration moves an entity of the table's entity type."""
    le_type = spec.entity.type
    for run in MigrationStore(meta).all_running():
        if any(t == le_type for t, _ in run.les):
            raise PurgeRefused(f"--table: migration {run.run_id} ({run.be_type} {run.be_id}, {run.source_zone} -> "
                               f"{run.target_zone}) moves {le_type} entities, whose {spec.name} rows are in flight: "
                               "wait for it to finish (`zonesync migrations`), then run the purge")  # fmt: skip


def _units(meta, le_type: str, ids: list[str]) -> dict[str, str]:
    """{entity id: its registered unit} of those of `ids` that are registered."""
    out = {}
    for part in _chunks(ids):
        marks = ", ".join(["%s"] * len(part))
        rows, _ = meta.run(f"SELECT e.le_id, z.name FROM locating_entities e JOIN zones z ON z.zone_id = e.unit_zone "
                           f"WHERE e.le_type = %s AND e.le_id IN ({marks})", (le_type, *part))  # fmt: skip
        out.update({str(i): z for i, z in rows})
    return out


def _counts(conn, spec: TableSpec, ids: list[str] | None = None) -> dict[str | None, int]:
    """{entity id: rows} in a zone (of `ids` only, when given)."""
    col = quote(spec.entity.column)
    out: dict[str | None, int] = {}
    with conn.cursor() as cur:
        if ids is None:
            cur.execute(f"SELECT {col}, COUNT(*) FROM {quote(spec.name)} GROUP BY {col}")
            for value, n in cur.fetchall():
                key = _id(value)
                out[key] = out.get(key, 0) + int(n)
        else:
            for part in _chunks(ids):
                where = entity_predicate(spec, {spec.entity.type: part})
                cur.execute(f"SELECT {col}, COUNT(*) FROM {quote(spec.name)} WHERE {where} GROUP BY {col}")
                for value, n in cur.fetchall():
                    out[_id(value)] = out.get(_id(value), 0) + int(n)
    conn.commit()
    return out


def survey(meta, plan: Plan, zone: str, connect) -> ZonePurge:
    """What `zone` holds of the table by unit; each other unit's entities confirmed at their
    owner (its rows there at least as many as here), else listed short."""
    spec = plan.spec
    found = ZonePurge(zone)
    conn = connect(zone)
    try:
        here = _counts(conn, spec)
    finally:
        conn.close()
    units = _units(meta, spec.entity.type, sorted(i for i in here if i is not None))
    elsewhere: dict[str, list[str]] = {}
    for le_id, n in here.items():
        unit = units.get(le_id) if le_id is not None else None
        if unit is None:
            found.unregistered[le_id] = n
        elif unit == zone:
            found.own += n
        else:
            elsewhere.setdefault(unit, []).append(le_id)
    for owner, ids in sorted(elsewhere.items()):
        try:
            oconn = connect(owner)
            try:
                there = _counts(oconn, spec, ids)
            finally:
                oconn.close()
        except Exception:  # noqa: BLE001 - an owner down: its entities stay here, reported
            there = None
        for le_id in sorted(ids):
            at_owner = None if there is None else there.get(le_id, 0)
            if at_owner is not None and at_owner >= here[le_id]:
                found.going.setdefault(owner, {})[le_id] = here[le_id]
            else:
                found.short.append((le_id, owner, here[le_id], at_owner))
    return found


def purge_zone(meta, plan: Plan, found: ZonePurge, connect, batch: int = resident.PURGE_BATCH) -> None:
    """The confirmed entities' rows deleted in the zone (migrate/resident.py `purge`), owner
    by owner, into found.deleted. Each chunk first reads the zone's admits under the head's
    shared lock: an entity a migration admits here meanwhile stops the purge."""
    try:
        refuse_migrations(meta, plan.spec)  # (again: one may have started since the request was checked)
    except PurgeRefused as exc:
        raise PurgeStopped(str(exc).removeprefix("--table: ")) from None
    le_type = plan.spec.entity.type
    conn = connect(found.zone)
    try:
        for owner, rows in sorted(found.going.items()):
            found.deleted[owner] = 0
            for ids in _chunks(sorted(rows)):
                predicate = entity_predicate(plan.spec, {le_type: ids})
                done = resident.purge(conn, {plan.table: predicate}, batch, _not_admitted(found.zone, le_type, ids))
                found.deleted[owner] += done[plan.table]
    finally:
        conn.rollback()
        conn.close()


def _not_admitted(zone: str, le_type: str, ids: list[str]):
    wanted = set(ids)

    def check(cur) -> None:
        cur.execute(HEAD)  # held to the chunk's commit: an admit waits for it (apply/batch/resident.py)
        cur.execute("SELECT le_id, run_id FROM zonesync.resident_admits WHERE le_type = %s", (le_type,))
        admitted = sorted((i, r) for i, r in cur.fetchall() if i in wanted)
        if admitted:
            le_id, run_id = admitted[0]
            raise PurgeStopped(f"{le_type} {le_id} is admitted in zone {zone} by migration {run_id}: its rows are "
                               "arriving there; run the purge again once the migration is over")  # fmt: skip

    return check


def record(meta, plan: Plan, reason: str, results: list[ZonePurge], actor: str | None = None) -> None:
    """The run in meta's audit log, with its reason."""
    detail = {
        "reason": reason,
        "table": plan.table,
        "rules_version": plan.version,
        "zones": {
            r.zone: {
                "deleted": r.deleted,
                "kept_own": r.own,
                "unregistered": {str(k): v for k, v in r.unregistered.items()},
                "skipped": [{"id": i, "owner": o, "here": h, "at_owner": a} for i, o, h, a in r.short],
            }
            for r in results
        },
    }
    with meta.transaction() as cur:
        audit(cur, actor or default_actor(), "resident.purge", detail)


def _rows(n: int) -> str:
    return f"{n} row" + ("" if n == 1 else "s")


def _by_owner(counts: dict[str, int], entities: dict[str, dict[str, int]], le_type: str) -> str:
    parts = []
    for owner, n in sorted(counts.items()):
        k = len(entities.get(owner, {}))
        parts.append(f"{owner}: {_rows(n)} of {k} {le_type}" + ("" if k == 1 else "s"))
    return ", ".join(parts)


def lines(plan: Plan, r: ZonePurge, dry_run: bool) -> list[str]:
    """What a zone's purge did (or would do), for people."""
    le_type = plan.spec.entity.type
    out = []
    if dry_run:
        going = {o: sum(v.values()) for o, v in r.going.items()}
        total = sum(going.values())
        what = f"{_rows(total)} would go" + (f" ({_by_owner(going, r.going, le_type)})" if total else "")
    else:
        total = sum(r.deleted.values())
        what = f"deleted {_rows(total)}" + (f" ({_by_owner(r.deleted, r.going, le_type)})" if total else "")
    out.append(f"zone {r.zone}: {what}; {_rows(r.own)} of its own {le_type}s stay")
    if r.unregistered:
        n = sum(r.unregistered.values())
        ids = ", ".join("NULL" if i is None else i for i in sorted(r.unregistered, key=lambda i: (i is None, i or "")))
        out.append(f"zone {r.zone}: {_rows(n)} of {len(r.unregistered)} {le_type}(s) registered nowhere stay "
                   f"({le_type} {ids[:200]}): their unit is unknown; register them (`zonesync entity register "
                   f"{le_type} ID --zone Z --reason ...`) and run the purge again")  # fmt: skip
    for le_id, owner, here, at_owner in r.short:
        there = "could not be read" if at_owner is None else f"holds only {_rows(at_owner)}"
        out.append(f"zone {r.zone}: skipped {le_type} {le_id} ({_rows(here)} here): its owner zone {owner} {there}, "
                   f"so these may be the only copy; repair {owner} first (`zonesync entity rows {le_type} {le_id} "
                   f"--zone {owner}`), then run the purge again")  # fmt: skip
    return out


def run(meta, table: str | None, zones: list[str], reason: str | None, dry_run: bool, connect, out=print,
        batch: int = resident.PURGE_BATCH, actor: str | None = None) -> int:  # fmt: skip
    """The whole command: 0 done, 1 an entity skipped (its owner short) or stopped part-way;
    PurgeRefused (nothing changed) for a bad request."""
    plan = prepare(meta, table, zones, reason, dry_run)
    spec = plan.spec
    head = f"resident purge {plan.table} ({spec.entity.type} by {spec.entity.column}, rules version {plan.version})"
    out(head + (": dry run, nothing deleted" if dry_run else f": zones {', '.join(plan.zones)}"))
    results, stopped = [], None
    for zone in plan.zones:
        found = survey(meta, plan, zone, connect)
        if not dry_run and found.going:
            try:
                purge_zone(meta, plan, found, connect, batch)
            except PurgeStopped as exc:
                stopped = f"zone {zone}: stopped: {exc}"
        results.append(found)
        for line in lines(plan, found, dry_run):
            out(line)
        if stopped:
            out(stopped)
            break
    if not dry_run:
        record(meta, plan, reason or "", results, actor)
    return 1 if stopped or any(r.short for r in results) else 0
