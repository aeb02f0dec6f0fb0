"""The steps of a full copy, each a transaction that can be retried (docs/copy.md):

    preflight -> record_start -> start_incremental -> row copy (Spark) -> catch_up
    -> prune -> verify -> join;  rollback when a step before join failed for good.

Every step re-reads the run from meta and the target zone, so a retry after a kill
goes on from what is recorded: the start positions are written once; the target's
apply_state as it was before is written once, before anything moves it; the chunks
that are done are done in the target, with their rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from zonesync.capture.binlog import binlog_end
from zonesync.copy import chunks, positions
from zonesync.copy.merge import drop_stage, stage_name
from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync.copy.store import FAILED, ROLLED_BACK, RUNNING, SUCCEEDED, Copy, CopyStore
from zonesync.meta.db import MetaConfig
from zonesync.meta.store import MetaStore
from zonesync.runtime import transport

APP_DB = "zonesync_app"


@dataclass
class CopyContext:
    meta: MetaConfig
    run_id: str
    request: CopyRequest
    zone_conn: Callable  # zone name -> a new DB-API connection to its app database
    bootstrap: Callable[[], str] = transport.bootstrap
    partitions: int = field(default_factory=transport.partitions)
    topic_of: Callable[[str], str] = transport.topic
    actor: str = "airflow"
    app_db: str = APP_DB

    @property
    def store(self) -> CopyStore:
        return CopyStore(self.meta)

    def run(self) -> Copy:
        return self.store.require(self.run_id)

    def zones(self) -> dict[str, int]:
        return MetaStore(self.meta).zones()


def _with(ctx: CopyContext, zone: str, fn):
    conn = ctx.zone_conn(zone)
    try:
        return fn(conn)
    finally:
        conn.close()


def preflight(ctx: CopyContext) -> Copy:
    """The request against the mesh and both zones' tables; the run's row (one copy per
    target at a time). Refusals change nothing."""
    found = MetaStore(ctx.meta).rules_at()
    tables = found[1].tables if found else {}
    req = ctx.request.resolved(ctx.zones(), tables)
    for zone in (req.source_zone, req.target_zone):
        for t in req.tables:
            _with(ctx, zone, lambda conn, t=t, zone=zone: chunks.check_copyable(conn, ctx.app_db, t, zone))
    _refuse_some_tables_over_halted(req.tables, tables, _with(ctx, req.target_zone, positions.snapshot),
                                    req.target_zone)  # fmt: skip
    return ctx.store.create(ctx.run_id, req, ctx.actor)


def _refuse_some_tables_over_halted(copied, replicated, state: dict, zone: str) -> None:
    """A copy of some tables only is refused when the target has halted partitions in
    `state` (positions.snapshot): the copy moves them on to its start, and the events
    they lost may touch any table. Checked at preflight and again on the apply_state
    recorded before the copy moves anything (a partition may halt in between)."""
    halted = sorted(f"{s}/{p}" for s, parts in state.items() for p, v in parts.items() if v[2] == "halted")
    if halted and set(copied) != set(replicated):
        raise CopyRefused(
            f"tables: zone {zone} has halted partitions ({halted}); the events they lost may touch any "
            "table, so a copy that clears them must take every replicated table (leave --tables out)"
        )


def _has_applied(ctx: CopyContext, conn, zone: str, ends: dict) -> bool:
    """Has `zone` (on `conn`) applied every other zone of `ends` up to its binlog position there?"""
    from zonesync.apply.tools.progress import is_applied

    return all(is_applied(ctx.meta, conn, z, (ends[z][0], int(ends[z][1]))) for z in ends if z != zone)


def _running(ctx: CopyContext) -> Copy:
    run = ctx.run()
    if run.status != RUNNING:
        raise CopyRefused(f"copy {ctx.run_id} is {run.status}: {run.detail or ''}".strip())
    return run


def record_start(ctx: CopyContext) -> dict:
    """Where the target's appliers will replay each source from (positions.py), recorded
    once, before the first chunk is read; refused if a topic no longer holds it."""
    run = _running(ctx)
    if run.start_json is None:
        zones = ctx.zones()
        start = _with(
            ctx,
            run.source_zone,
            lambda conn: positions.record_start(
                ctx.bootstrap(), conn, run.source_zone, run.target_zone, zones, ctx.partitions, ctx.topic_of
            ),
        )
        run = ctx.store.set_once(ctx.run_id, start_json=start)
    start = run.positions()
    positions.check_retained(ctx.bootstrap(), _typed(start), topic_of=ctx.topic_of)
    ctx.store.phase(ctx.run_id, "start_recorded")
    return start


def _has_rows(conn, app_db: str, table: str) -> bool:
    with conn.cursor() as cur:
        cur.execute(f"SELECT EXISTS (SELECT 1 FROM {chunks.q(app_db)}.{chunks.q(table)})")
        found = bool(cur.fetchone()[0])
    conn.commit()
    return found


def _typed(raw: dict) -> positions.Positions:
    return {s: {int(p): (int(v[0]), int(v[1])) for p, v in parts.items()} for s, parts in raw.items()}


def start_incremental(ctx: CopyContext) -> dict:
    """The target's appliers to the start positions, the tables in copy mode. What the
    target held before is recorded first (rollback puts it back)."""
    run = _running(ctx)
    if run.before_json is None:
        run = ctx.store.set_once(ctx.run_id, before_json=_with(ctx, run.target_zone, positions.snapshot))
    start = _typed(run.positions())
    before = run.positions("before_json")
    found = MetaStore(ctx.meta).rules_at()
    _refuse_some_tables_over_halted(run.tables, found[1].tables if found else {}, before, run.target_zone)

    def install(conn) -> None:
        empty = {t for t in run.tables if not _has_rows(conn, ctx.app_db, t)}
        positions.install(conn, ctx.run_id, run.source_zone, start, run.tables, before, empty)

    _with(ctx, run.target_zone, install)
    ctx.store.phase(ctx.run_id, "copying")
    return {s: len(p) for s, p in start.items()}


def progress(ctx: CopyContext) -> dict:
    """Per table (from the target): chunks planned and done, rows merged, the first and
    last chunk's commit time; and `rate` (rows/s) and `eta_s` while chunks are left."""
    run = ctx.run()
    rows = _with(ctx, run.target_zone, lambda conn: chunks.read(conn, ctx.run_id))
    return chunks.summarize(run.tables, rows)


def caught_up(ctx: CopyContext) -> bool:
    """Has the target applied every source up to where each stood when the row copy ended?
    (Recorded once, at the first look after the row copy.)"""
    run = _running(ctx)
    left = [t for t, p in progress(ctx).items() if p["done"] < p["chunks"] or not p["chunks"]]
    if left:
        raise CopyRefused(f"the row copy has not finished tables {', '.join(left)}: run it (again) first")
    zones = sorted(ctx.zones())
    if run.end_json is None:
        # every zone's, the target's too: prune asks the rows' owners to have applied it
        ends = {z: list(_with(ctx, z, binlog_end)) for z in zones}
        run = ctx.store.set_once(ctx.run_id, end_json=ends)
        ctx.store.phase(ctx.run_id, "catching_up")
    ends = run.positions("end_json")
    return _with(ctx, run.target_zone, lambda conn: _has_applied(ctx, conn, run.target_zone, ends))


def prune(ctx: CopyContext, owner_wait_s: float = 60.0) -> dict:
    """Rows only the target holds, deleted where that is certain (prune.py): per table,
    candidates, deleted and kept."""
    from zonesync.copy import prune as rule

    run = _running(ctx)
    ends = run.positions("end_json")
    if not ends:
        raise CopyRefused("prune: catch_up has not recorded where the row copy ended; run it first")
    found = MetaStore(ctx.meta).rules_at()
    rules = found[1]
    ctx.store.phase(ctx.run_id, "pruning")
    report = {}
    dst = ctx.zone_conn(run.target_zone)
    try:
        for table in run.tables:
            key = [c for c, _ in chunks.key_columns(dst, ctx.app_db, table)]
            rows = rule.candidates(dst, ctx.app_db, table, stage_name(ctx.run_id, table), key)
            by_owner, kept = rule.owners(rules, table, run.target_zone, rows)
            deleted = 0
            for owner, owned in sorted(by_owner.items()):
                absent = _absent_in_owner(ctx, owner, ends, table, key, owned, owner_wait_s)
                deleted += rule.delete_versions(dst, table, key, absent)
                kept += len(owned) - len(absent)
            report[table] = {"candidates": len(rows), "deleted": deleted, "kept": kept}
    finally:
        dst.close()
    return report


def _absent_in_owner(ctx, owner: str, ends: dict, table: str, key, rows, wait_s: float) -> list[dict]:
    """The rows the owner lacks, once it applied every other zone up to `ends`; none (all
    kept) when it has not within `wait_s`."""
    import time

    from zonesync.copy import prune as rule

    conn = ctx.zone_conn(owner)
    try:
        deadline = time.monotonic() + wait_s
        while not _has_applied(ctx, conn, owner, ends):
            if time.monotonic() > deadline:
                return []
            time.sleep(0.2)
        return rule.absent_in(conn, table, key, rows)
    finally:
        conn.close()


def verify(ctx: CopyContext, attempts: int = 10, pause_s: float = 0.5) -> dict:
    """Every chunk equal in source and target, while both keep writing (verify.py): at each
    look, both zones first apply every zone's writes up to where each stood when the look
    began; a chunk whose row count or checksum then differs is compared row by row, and
    only rows no write in flight explains count. A difference still there after
    `attempts` looks fails the copy, naming the rows."""
    run = _running(ctx)
    ctx.store.phase(ctx.run_id, "verifying")
    src, dst = ctx.zone_conn(run.source_zone), ctx.zone_conn(run.target_zone)
    try:
        return {t: _verify_table(ctx, run, src, dst, t, attempts, pause_s) for t in run.tables}
    finally:
        src.close()
        dst.close()


# How much older than the look a version must be to count as settled: a guarded
# transaction commits within the rules' deadline (2 s) of taking its versions.
SETTLED_MARGIN_US = 3_000_000


def _settled_cut(ctx: CopyContext, run: Copy, timeout_s: float = 60.0) -> int:
    """Wait until source and target applied every other zone up to where each zone's
    binlog ended now; the version at or below which every write is then in both."""
    import time

    cut = int(time.time() * 1_000_000) - SETTLED_MARGIN_US
    zones = sorted(ctx.zones())
    ends = {z: _with(ctx, z, binlog_end) for z in zones}
    deadline = time.monotonic() + timeout_s
    for zone in (run.source_zone, run.target_zone):
        conn = ctx.zone_conn(zone)
        try:
            while not _has_applied(ctx, conn, zone, ends):
                if time.monotonic() > deadline:
                    raise CopyRefused(f"verify: zone {zone} did not catch up with the others in {timeout_s:.0f} s")
                time.sleep(0.1)
        finally:
            conn.close()
    return cut


def _verify_table(ctx: CopyContext, run: Copy, src, dst, table: str, attempts: int, pause_s: float) -> int:
    import time

    from zonesync.copy import verify as sums

    plan = chunks.read(dst, ctx.run_id, table)
    by_no = {c["chunk"]: c for c in plan}
    cols = [c for c, _ in chunks.key_columns(src, ctx.app_db, table)]
    differ, rows = [c["chunk"] for c in plan], {}
    for attempt in range(attempts):
        cut = _settled_cut(ctx, run)
        have, got = sums.chunk_sums(src, table, cols, plan, differ), sums.chunk_sums(dst, table, cols, plan, differ)
        differ = [n for n in differ if have[n] != got[n]]
        if differ:
            for n in differ:
                a, b = sums.chunk_rows(src, table, cols, by_no[n]), sums.chunk_rows(dst, table, cols, by_no[n])
                # (deletes looked up after the rows were read: one between the reads is seen)
                src_gone, dst_gone = sums.recently_deleted(src, table, cut), sums.recently_deleted(dst, table, cut)
                found = sums.real_differences(a, b, src_gone, dst_gone, cut)
                rows[n] = [f"{k} {_side(a.get(k))} / {_side(b.get(k))}" for k in found]
            differ = [n for n in differ if rows[n]]
        if not differ:
            return len(plan)
        if attempt < attempts - 1:
            time.sleep(pause_s)
    keys = [k for n in differ for k in rows[n]][:5]
    raise CopyRefused(
        f"verify: {table} differs between {run.source_zone} and {run.target_zone} in chunks {differ[:10]} "
        f"after {attempts} looks (key source / target: {'; '.join(keys)}); the copy is not joined"
    )


def _side(row: tuple[int, int] | None) -> str:
    return "absent" if row is None else f"version {row[0]}"


def join(ctx: CopyContext) -> Copy:
    """The copied tables leave copy mode (the appliers apply them by the normal rules
    again) and the staging tables go: the target is a normal member of the mesh."""
    run = ctx.run()
    if run.status == SUCCEEDED:
        return run
    _running(ctx)

    def leave(conn):
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync.copy_tables WHERE run_id = %s", (ctx.run_id,))
        conn.commit()
        for t in run.tables:
            drop_stage(conn, stage_name(ctx.run_id, t))

    _with(ctx, run.target_zone, leave)
    ctx.store.phase(ctx.run_id, "joined")
    done = progress(ctx)
    rows = sum(p["rows"] for p in done.values())
    return ctx.store.finish(ctx.run_id, SUCCEEDED, f"joined: {rows} rows copied in {len(done)} table(s)")


def rollback(ctx: CopyContext, why: str = "a step failed") -> Copy | None:
    """Before join: the target's appliers back where they were, its tables out of copy
    mode, staging dropped, the run failed with its reason. Rows already merged stay: each
    is a real version of its row, newer than what it replaced."""
    run = ctx.store.get(ctx.run_id)
    if run is None:
        return None  # refused before its row existed: nothing changed
    if run.status != RUNNING:
        return run
    if run.before_json is not None:
        _with(ctx, run.target_zone, lambda conn: positions.restore(conn, ctx.run_id, run.positions("before_json")))
    for t in run.tables:
        _with(ctx, run.target_zone, lambda conn, t=t: drop_stage(conn, stage_name(ctx.run_id, t)))
    status = ROLLED_BACK if run.before_json is not None else FAILED
    return ctx.store.finish(ctx.run_id, status, f"{status}: {why}")
