"""A migration of a biz entity's locating entities, step by step (seed 004 §5, docs/migration.md);
one function per DAG task. Replicated tables only so far: every zone holds the LEs' rows,
so what moves is who may write them (owner precedence: a registered LE's unit decides).

Each step re-reads the run row, does what is left, and records what it decided before
acting on it, so killing it anywhere and running it again converges:

preflight      the request valid; the biz entity registered with every LE together in one
               unit and writable; the target another known zone; every guard healthy; the
               target's appliers of the source's stream not halted; one migration of the
               entity at a time. Nothing is published.
verify         (writes go on) the LEs' rows compared row by row between source and target
               (migrate/verify.py: the consistency check restricted to them, lag-aware); a
               difference fails the step before anything was stopped.
stop_write     the LEs' stop-write flag, unit still the source, as one meta version
               (published and recorded with its moment in one commit); every registered
               guard must ack it (a silent one fails the step, to roll back): from the acks
               on, no zone accepts a write of the LEs, and none judged under an older
               version is still in flight (a guard acks only then).
sync_position  once meta's clock passes the acks plus the maximum transaction time, P =
               the source's binlog position: every write of the LEs is before it.
synced         the target applied the source's stream up to P (the last data of the LEs,
               for replicated tables: their rows are where the mesh put them).
final_check    per table, the count and checksum of the LEs' rows in source and target
               (migrate/final_check.py, pushed down); a difference fails the step.
flip           the point of no return: unit := target, writes still stopped; every healthy
               guard acks. From here failures retry, never roll back, and a new LE of the
               biz entity may be registered in the target (S004-31; before, none may be).
lift           writes allowed in the target; every healthy guard acks; the run succeeds,
               with its stop-write window (the stop's publish to the lift's acks), naming
               the LEs registered in the target meanwhile.
rollback       before flip, when a step failed for good: the LEs writable again in the
               source; after flip it refuses (claim_phase makes the two exclusive).

stop_write to lift is the stop-write window: the DAG runs it as one task (`cutover`), each
step still recorded and idempotent, so no task start falls inside it.

Resident tables (rows only in the LEs' unit; resident.py) add three steps: admit (the
target applies the LEs' resident rows from the source's stream from then on) and the stock
copy (Spark) before verify, and release (the source's copy purged) after the lift; the
rollback withdraws the admit and purges the target's partial copy. KV keys (kv_keys.py)
move beside them: a bulk copy in admit, every key compared in verify (plan1), the keys
changed since caught up and compared in final_check, the target's copies removed by the
rollback, the source's by release.
"""

from __future__ import annotations

import time

from zonesync.apply.tools.progress import is_applied
from zonesync.capture.binlog import binlog_end
from zonesync.check.request import entity_tables
from zonesync.meta.db import MetaConfig
from zonesync.meta.entities import EntityRegistry
from zonesync.meta.guards import AckTimeout, UnhealthyGuards, require_healthy, wait_acks
from zonesync.meta.store import MetaStore
from zonesync.migrate import final_check as le_sums
from zonesync.migrate import gate as migration_gate
from zonesync.migrate import resident
from zonesync.migrate import verify as verify_check
from zonesync.migrate.context import MigrationContext as MigrationContext
from zonesync.migrate.context import MigrationError as MigrationError
from zonesync.migrate.context import rules_of, running, with_zone
from zonesync.migrate.moving import admit as admit
from zonesync.migrate.moving import (
    before_the_copy,
    check_keys_in_window,
    keys_to_move,
    kv_moved,
    resident_tables,
    undo_admit,
    verify_keys,
)
from zonesync.migrate.moving import release as release
from zonesync.migrate.moving import stock_run_id as stock_run_id
from zonesync.migrate.request import AlreadyMigrating, MigrationRefused, MigrationRequest, UnknownBizEntity
from zonesync.migrate.store import FAILED, ROLLED_BACK, RUNNING, SUCCEEDED, Migration, MigrationStore


def _publish(
    ctx: MigrationContext,
    run: Migration,
    zone: str,
    status: str,
    what: str,
    phases: tuple[str, ...],
    record: str | None = None,
    stamp: str | None = None,
) -> int:
    """The LEs (and their biz entity) in `zone` with `status`, as one new meta version,
    published only while the run is in one of `phases` and recorded (`record`, and the
    moment as `stamp`) in the same commit (MigrationStore.publishing): a step killed anywhere either published and
    recorded, or did neither, and a rollback that claimed the run first stops it."""
    return EntityRegistry(ctx.meta).register_biz(
        run.be_type, run.be_id, zone, run.les, f"migration {run.run_id}: {what} ({run.reason})", status=status,
        author=ctx.actor, within=ctx.store.publishing(run.run_id, phases, record, stamp),
    )  # fmt: skip


def _acks(ctx: MigrationContext, version: int, step: str, every_instance: bool) -> None:
    try:
        wait_acks(ctx.meta, version, set(MetaStore(ctx.meta).zones()), ctx.ack_timeout_s, unhealthy_too=every_instance)
    except AckTimeout as exc:
        raise MigrationError(f"{step}: {exc}") from None


def movable(meta: MetaConfig, req: MigrationRequest) -> tuple[str, list]:
    """(the source zone, the LEs that move) when the request is valid and the registry lets
    them move; else MigrationRefused naming the field (UnknownBizEntity, AlreadyMigrating:
    the API's 404 and 409). Meta only: what the HTTP API and the CLI check before they
    trigger a run; preflight checks the guards and the target's appliers too, and
    MigrationStore.create checks "one run at a time" again under its lock.

    All the biz entity's LEs move unless the request names some (`les`, S004-30: a biz
    entity moved LE by LE, each run atomic): those must be the biz entity's, together in
    one zone, writable there. The others may be anywhere (an earlier run moved them)."""
    req.check(MetaStore(meta).zones())
    found = EntityRegistry(meta).biz(req.be_type, req.be_id)
    if found is None:
        raise UnknownBizEntity(f"tenant: {req.be_type} {req.be_id} is not a registered biz entity: register it "
                               "(`zonesync entity register`) before migrating it")  # fmt: skip
    biz, les = found
    if not les:
        raise MigrationRefused(f"tenant: {req.be_type} {req.be_id} has no locating entity: nothing to migrate")
    running = MigrationStore(meta).running(req.be_type, req.be_id)
    if running:
        raise AlreadyMigrating(f"tenant: {req.be_type} {req.be_id} is being migrated already ({running[0].run_id}); "
                               "wait for it or roll it back")  # fmt: skip
    if req.les:
        return _named(req, les)
    if biz.zone == req.target_zone:
        raise MigrationRefused(f"to: {req.be_type} {req.be_id} is in zone {biz.zone} already")
    apart = [f"{le.le_type} {le.le_id} ({le.zone}{', stopped' if le.stop_write else ''})" for le in les
             if le.zone != biz.zone or le.stop_write]  # fmt: skip
    if apart:
        raise MigrationRefused(f"tenant: locating entities not writable in {biz.zone} with their biz entity: "
                               f"{', '.join(apart)}; finish or roll back what moved or stopped them, or name the "
                               "ones to move (les, `--le TYPE:ID`)")  # fmt: skip
    return biz.zone, les


def _named(req: MigrationRequest, les: list) -> tuple[str, list]:
    """The LEs a request names, checked: the biz entity's, in one zone, writable there."""
    mine = {(le.le_type, le.le_id): le for le in les}
    foreign = [f"{t} {i}" for t, i in req.les if (t, i) not in mine]
    if foreign:
        raise MigrationRefused(f"les: {', '.join(foreign)} not {req.be_type} {req.be_id}'s; its locating entities "
                               f"are {', '.join(f'{le.le_type}:{le.le_id}' for le in les)}")  # fmt: skip
    named = [mine[le] for le in req.les]
    zones = sorted({le.zone for le in named})
    if len(zones) > 1:
        where = ", ".join(f"{le.le_type} {le.le_id} ({le.zone})" for le in named)
        raise MigrationRefused(f"les: the locating entities of one run move from one zone: {where}; "
                               "name those of one zone")  # fmt: skip
    if zones[0] == req.target_zone:
        raise MigrationRefused(f"les: {', '.join(f'{le.le_type} {le.le_id}' for le in named)} in zone "
                               f"{zones[0]} already")  # fmt: skip
    stopped = [f"{le.le_type} {le.le_id}" for le in named if le.stop_write]
    if stopped:
        raise MigrationRefused(f"les: {', '.join(stopped)} stopped; finish or roll back what stopped them")
    return zones[0], named


def preflight(ctx: MigrationContext) -> Migration:
    """The run's row, or MigrationRefused naming what is wrong (nothing changed)."""
    existing = ctx.store.get(ctx.run_id)
    if existing is not None:
        return existing
    req = ctx.request
    zones = MetaStore(ctx.meta).zones()
    source_zone, les = movable(ctx.meta, req)
    try:
        require_healthy(ctx.meta, set(zones))
    except UnhealthyGuards as exc:
        raise MigrationRefused(f"guards: {exc}") from None
    halted = with_zone(ctx, req.target_zone, lambda conn: _halted(conn, source_zone))
    if halted:
        raise MigrationRefused(f"to: zone {req.target_zone} halted partitions {halted} of zone {source_zone}'s "
                               "stream: resume them (`zonesync resume`) first")  # fmt: skip
    return ctx.store.create(ctx.run_id, req, source_zone, [(le.le_type, le.le_id) for le in les], ctx.actor)


def _halted(conn, source_zone: str) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT partition_no FROM zonesync.apply_state WHERE source_zone = %s AND status = 'halted' "
                    "ORDER BY partition_no", (source_zone,))  # fmt: skip
        found = [int(p) for (p,) in cur.fetchall()]
    conn.commit()
    return found


def stop_first(ctx: MigrationContext, max_rows: int) -> dict:
    """plan2 (S004-28): the LEs' writes stopped before anything is copied, refused when their
    resident rows and KV keys at the source number more than `max_rows` together (the
    tenant would stay stopped through a long copy: plan1 copies while it writes). plan1:
    nothing."""
    run = running(ctx)
    if run.mode != "plan2":
        return {"mode": run.mode}
    if run.stop_version is None:
        predicates = resident_tables(ctx, run)
        rows = with_zone(ctx, run.source_zone, lambda conn: resident.count(conn, predicates))
        keys = keys_to_move(ctx, run)
        if rows + keys > max_rows:
            what = f"{rows} resident rows" + (f" and {keys} KV keys" if keys else "")
            raise MigrationRefused(f"mode: plan2 stops {run.be_type} {run.be_id}'s writes while its {what} are "
                                   f"copied, more than plan2_max_rows ({max_rows}): use plan1, which copies while "
                                   "it writes, or raise the limit")  # fmt: skip
    run = stop_write(ctx)
    return {"mode": run.mode, "stop_version": run.stop_version}


def gate(ctx: MigrationContext, max_lag_s: float, window: str) -> str | None:
    """Why the stop-write gate (gate.py, S004-15) is closed now, or None when the cutover
    may stop the LEs' writes; plan2 stopped them already (its gate is its size limit)."""
    run = running(ctx)
    if run.stop_version is not None:
        return None
    return migration_gate.closed_because(ctx.meta, run.source_zone, run.target_zone, max_lag_s, window)


def stop_write(ctx: MigrationContext) -> Migration:
    """The LEs stopped in the source; every registered guard's ack; the moment stamped."""
    run = running(ctx)
    if run.stop_version is None:
        _publish(ctx, run, run.source_zone, "STOP_WRITE", "stop", ("preflight", "checked"), "stop_version",
                 stamp="stop_published_at")  # fmt: skip
        run = ctx.store.require(ctx.run_id)
    _acks(ctx, run.stop_version, "stop_write", every_instance=True)
    ctx.store.phase(ctx.run_id, "stopped")
    return ctx.store.stamp_once(ctx.run_id, "stopped_at")


def sync_position(ctx: MigrationContext, sleep=time.sleep) -> tuple[str, int]:
    """P: the source's binlog position once meta's clock passed the stop's acks plus the
    rules' maximum transaction time (recorded once)."""
    run = running(ctx)
    if run.stopped_at is None:
        raise MigrationError("sync_position: the stop-write is not acked yet: run stop_write first")
    if run.position is None:
        if ctx.max_txn_ms is not None:
            deadline_ms = ctx.max_txn_ms
        else:
            found = MetaStore(ctx.meta).rules_at()
            deadline_ms = found[1].txn_deadline_ms if found else 0
        left_ms = deadline_ms - ctx.store.ms_since_stopped(ctx.run_id)
        if left_ms > 0:
            sleep(left_ms / 1000)  # a span of the protocol, on meta's clock: no event marks its end
        position = with_zone(ctx, run.source_zone, binlog_end)
        if position is None:
            raise MigrationError(f"sync_position: zone {run.source_zone} has no binary log: zonesync needs one")
        run = ctx.store.set_once(ctx.run_id, position_json=list(position))
    return run.position


def synced(ctx: MigrationContext) -> bool:
    """Has the target applied the source's stream up to P? (the sensor's poke)"""
    run = running(ctx)
    if run.position is None:
        raise MigrationError("synced: no source position recorded: run sync_position first")
    done = with_zone(ctx, run.target_zone, lambda conn: is_applied(ctx.meta, conn, run.source_zone, run.position))
    if done:
        ctx.store.phase(ctx.run_id, "synced")
    return done


def verify_start(ctx: MigrationContext) -> dict:
    """Before the stop: the consistency check of the LEs' rows (migrate/verify.py) started;
    what its Spark job (the DAG's verify_check) needs."""
    run = running(ctx)
    before_the_copy(run, "verify_start")
    if run.mode == "plan2" or not _compared(ctx, run):  # the final check compares every row exactly
        return {"check_run_id": "", "zones": "", "tables": ""}
    return verify_check.start(verify_check.check_context(ctx.meta, run, ctx.zone_conn))


def _compared(ctx: MigrationContext, run: Migration) -> list[str]:
    """The tables the verify's check compares: those declaring the LEs' entity types, but
    replace_key ones (their keys differ by design; the final check compares them)."""
    rules = rules_of(ctx, "verify")
    return [t for t in entity_tables(rules.tables, set(run.entities)) if not rules.tables[t].replace_key]


def verify(ctx: MigrationContext, result: dict | None = None) -> dict:
    """The check's result turned into the migration's verdict: a difference fails the step
    (nothing is stopped yet; the DAG's rollback ends the run), a match lets the cutover go."""
    run = running(ctx)
    if result is None and run.mode == "plan2":
        return {"tables": 0, "differ": 0, "skipped": "plan2: the final check compares with writes stopped"}
    if result is None and not _compared(ctx, run):  # (the LEs' KV keys are still compared)
        verify_keys(ctx)
        ctx.store.phase(ctx.run_id, "checked")
        return {"tables": 0, "differ": 0, "skipped": "no table the check compares declares the LEs' types"}
    if result is None:
        raise MigrationError("verify: no result of the LEs' check: run verify_start and verify_check first")
    report = verify_check.outcome(verify_check.check_context(ctx.meta, run, ctx.zone_conn), result)
    if report["differ"] or report.get("detail"):
        detail = (f"{report['differ']} rows differ, e.g. {report['mismatched'][:5]}" if report["differ"]
                  else report["detail"])  # fmt: skip
        raise MigrationError(f"verify: {detail} (`zonesync check report {verify_check.check_run_id(run.run_id)}`)")
    verify_keys(ctx)
    ctx.store.phase(ctx.run_id, "checked")
    return report


def final_check(ctx: MigrationContext) -> dict:
    """Writes stopped and the target synced: the LEs' rows counted and checksummed per table
    in both zones; a difference fails the step (the rollback follows: no flip)."""
    run = running(ctx)
    if run.phase not in ("synced", "verified"):
        raise MigrationError(f"final_check: the target is not proven synced (phase {run.phase}): run synced first")
    rules = rules_of(ctx, "final_check")
    check_keys_in_window(ctx, run)
    zone_ids = sorted(MetaStore(ctx.meta).zones().values())
    counts, differ = le_sums.compare(rules, run.entities, (run.source_zone, run.target_zone), zone_ids, ctx.zone_conn,
                                     run.run_id)  # fmt: skip
    if differ:
        raise MigrationError(f"final_check: the LEs' rows differ: {'; '.join(differ)[:2000]} (`zonesync check "
                             f"--zones {run.source_zone},{run.target_zone}` names the rows)")  # fmt: skip
    ctx.store.phase(ctx.run_id, "verified")
    return counts


def flip(ctx: MigrationContext) -> Migration:
    """The point of no return: the LEs' unit the target, writes still stopped."""
    run = ctx.store.require(ctx.run_id)
    if run.status != RUNNING:
        raise MigrationError(f"flip: migration {ctx.run_id} is {run.status}")
    if run.phase not in ("verified", "flipping", "lifted"):
        raise MigrationError(f"flip: the LEs' rows are not verified (phase {run.phase}): run verify first")
    if not ctx.store.claim_phase(ctx.run_id, "flipping"):
        raise MigrationRefused("flip: the migration is rolling back; start a new one")
    if run.flip_version is None:
        _publish(ctx, run, run.target_zone, "STOP_WRITE", "flip", ("flipping",), "flip_version")
        run = ctx.store.require(ctx.run_id)
    _acks(ctx, run.flip_version, "flip", every_instance=False)
    return ctx.store.stamp_once(ctx.run_id, "flipped_at")


def lift(ctx: MigrationContext) -> Migration:
    """Writes allowed in the target; the run succeeds with its stop-write window."""
    run = ctx.store.require(ctx.run_id)
    if run.flip_version is None:
        raise MigrationError("lift: the unit is not flipped yet: run flip first")
    if run.lift_version is None:
        _publish(ctx, run, run.target_zone, "ACTIVE", "lift", ("flipping", "lifted"), "lift_version")
        run = ctx.store.require(ctx.run_id)
    _acks(ctx, run.lift_version, "lift", every_instance=False)
    run = ctx.store.stamp_once(ctx.run_id, "lifted_at")
    if run.status == RUNNING:
        ctx.store.finish(ctx.run_id, SUCCEEDED, f"{len(run.les)} locating entities moved {run.source_zone} -> "
                         f"{run.target_zone}; stop-write window {run.window_ms:.0f} ms"
                         f"{kv_moved(ctx, run)}{_joined(ctx, run)}",
                         phase="lifted")  # fmt: skip
    return ctx.store.require(ctx.run_id)


def _joined(ctx: MigrationContext, run: Migration) -> str:
    """The biz entity's LEs registered in the target after the flip (S004-31: not the run's,
    never stopped), named in the run's outcome ('' when none)."""
    found = EntityRegistry(ctx.meta).biz(run.be_type, run.be_id)
    own = set(run.les)
    joined = [f"{le.le_type} {le.le_id}" for le in (found[1] if found else ())
              if (le.le_type, le.le_id) not in own and le.zone == run.target_zone]  # fmt: skip
    return f"; registered in {run.target_zone} during the run: {', '.join(joined)}" if joined else ""


def rollback(ctx: MigrationContext, why: str | None = None) -> str:
    """Before flip: the LEs writable again in the source, the run rolled back with `why`
    (default: the failure a step noted, MigrationStore.note_failure)."""
    store = ctx.store
    run = store.get(ctx.run_id)
    if run is None:
        return "nothing to roll back: the migration never started (preflight refused it)"
    if run.status == ROLLED_BACK:
        return run.detail or "rolled back"
    if not store.claim_phase(ctx.run_id, "rolling_back"):
        return "not rolled back: flip has started (past the point of no return); run flip and lift again"
    why = why or run.detail or "a step failed (see the run's task logs)"
    undo_admit(ctx, run)
    # stop_write publishes and records its version in one commit that checks the phase, so
    # after the claim the row tells whether writes were stopped, and no stop follows
    run = store.require(ctx.run_id)
    if run.stop_version is None:
        store.finish(ctx.run_id, FAILED, f"refused before any push: {why}")
        return f"nothing was pushed; migration failed: {why}"
    version = _publish(ctx, run, run.source_zone, "ACTIVE", "rollback", ("rolling_back",))
    try:
        _acks(ctx, version, "rollback", every_instance=False)
    except MigrationError as exc:
        store.finish(ctx.run_id, ROLLED_BACK, f"{why}; writable in {run.source_zone} again, but {exc}")
        raise
    store.finish(ctx.run_id, ROLLED_BACK, f"{why}; writable in {run.source_zone} again (v{version})")
    return store.require(ctx.run_id).detail
