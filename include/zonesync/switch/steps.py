"""The zone switch, step by step (seed 000 "Zone 切换"); one function per DAG task.

Each step re-reads the switch row, does what is left, and writes its decisions
with `set_once` before acting on them, so killing it anywhere and running it
again converges (S000-37):

preflight    the request is valid against the current rules; the staged rule
             sets pass the check; every guard of both zones is healthy; every
             zone's applier of from_zone's stream reports lag under the
             threshold and no halted partition (S000-39, S003-32); the ZSIDs
             are leased to this run (S000-38). Nothing is published.
record_state the current rules version, once: a re-run after block already
             pushed keeps the pre-switch version (S000-14).
block        record 1: the moved ZSIDs BLOCK, owner from_zone; every registered
             instance of both zones must ack (a dead or silent one fails the
             step: cases 3.1-3.4 -> rollback).
reshard      record 2: owner to_zone, RESHARDING; acks as above (4.1-4.3); T is
             taken after the last ack, on the meta store's clock.
sync_position waits until the meta clock passes the BLOCK acks + max
             transaction time (the seed counts from T; BLOCK is acked earlier
             and admits no write either), then reads P = from_zone's binlog
             position (from MySQL, not from the replicator: S000-31).
wait_sync    (a sensor) every other zone has applied from_zone's stream up to P
             (to_zone, and the third zones too: S000-39).
activate     record 3: owner to_zone ACTIVE. From here on failures retry, never
             roll back (S000-32); healthy instances must ack, dead ones are
             reported (S000-34).
verify       the moved ZSIDs' rows are the same in both zones, apart from what
             to_zone wrote since (the consistency check restricted to them:
             verify_start, the check's Spark job, verify; switch/verify.py); the
             lease is released.
rollback     when block, reshard, sync_position or wait_sync failed for good:
             restore the moved ZSIDs' recorded rules (other ZSIDs keep the head's),
             wait for acks; an instance that cannot be reached stays BLOCK or
             RESHARDING, which writes nothing, and is reported (S000-18, S000-24).

Every wait uses the meta store's clock or this process's monotonic clock, never
a comparison of two hosts' wall clocks (S000-28).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import pymysql

from zonesync.capture.binlog import binlog_end
from zonesync.meta.db import MetaConfig, MetaError
from zonesync.meta.guards import AckTimeout, list_instances, require_healthy, wait_acks
from zonesync.meta.store import MetaStore, RulesChanged
from zonesync.rules.check import check
from zonesync.rules.model import RuleSet
from zonesync.switch import plan
from zonesync.switch import verify as verify_check
from zonesync.switch.store import FAILED, ROLLED_BACK, RUNNING, SUCCEEDED, Switch, SwitchStore

log = logging.getLogger("zonesync.switch")


class SwitchError(MetaError):
    """A step cannot go on; the message says why and what to do."""


class RollbackStarted(SwitchError):
    """A rollback claimed this switch: no stage but the rollback's may be published any more."""


# What the switch row must say while a stage is published (checked under the rules
# head lock, with the row locked, so a rollback's phase claim waits for the publish
# or the publish sees the claim): block and reshard only while nobody rolls back,
# activate only once it claimed the point of no return.
PHASE_FOR = {"block_version": "running", "reshard_version": "running", "active_version": "activating"}


def _still_ours(run_id: str, field: str) -> Callable:
    def check(cur) -> None:
        cur.execute("SELECT status, phase FROM switches WHERE run_id = %s FOR UPDATE", (run_id,))
        row = cur.fetchone()
        status, phase = row if row else (None, None)
        if status != RUNNING or phase != PHASE_FOR[field]:
            raise RollbackStarted(
                f"switch {run_id} is {status} ({phase}): {field.removesuffix('_version')} is not published"
            )

    return check


@dataclass(frozen=True)
class SwitchParams:
    zsids: str
    from_zone: str
    to_zone: str
    reason: str
    ack_timeout_s: float = 10.0
    max_txn_ms: int = 500
    lag_threshold_s: float = 5.0
    sync_timeout_s: float = 120.0
    actor: str = "zonesync"


@dataclass
class SwitchContext:
    meta: MetaConfig
    run_id: str
    params: SwitchParams
    zone_conn: Callable[[str], object]  # zone name -> DB-API connection to its app database

    @property
    def store(self) -> SwitchStore:
        return SwitchStore(self.meta)

    @property
    def zones(self) -> set[str]:
        return {self.params.from_zone, self.params.to_zone}


def _head(meta: MetaConfig) -> tuple[int, RuleSet]:
    found = MetaStore(meta).rules_at()
    if found is None:
        raise SwitchError("no rules published yet: `zonesync rules apply FILE --reason ...` first")
    return found


def _running(ctx: SwitchContext) -> Switch:
    sw = ctx.store.require(ctx.run_id)
    if sw.status != RUNNING:
        raise SwitchError(f"switch {ctx.run_id} already ended ({sw.status}): start a new run")
    return sw


# What the moved ZSIDs may hold when a stage is published: its predecessor, or the stage
# itself (a retry). Anything else means someone else changed them: stop, do not overwrite.
def _expected(req: plan.SwitchRequest) -> dict[str, set[tuple[str, str]]]:
    a, b = req.from_zone, req.to_zone
    return {
        "block_version": {(a, "ACTIVE"), (a, "BLOCK")},
        "reshard_version": {(a, "BLOCK"), (b, "RESHARDING")},
        "active_version": {(b, "RESHARDING"), (b, "ACTIVE")},
        "rollback_version": {(a, "ACTIVE"), (a, "BLOCK"), (b, "RESHARDING")},
    }


def moved_states(rules: RuleSet, req: plan.SwitchRequest) -> set[tuple[str, str]]:
    return {(r.zone, r.status) for r in rules.rules for lo, hi in req.zsids if r.lo <= hi and r.hi >= lo}


def _publish_once(ctx: SwitchContext, field: str, make: Callable[[RuleSet], RuleSet], what: str) -> int:
    """Publish the next stage once; a retry reuses the version the first attempt chose.

    The stage is computed from the head, so a concurrent change to other ZSIDs is
    kept, and published only if the head is still the one it was computed from
    (compare-and-swap under the head lock; recomputed when another publisher got
    in between). The moved ZSIDs must hold the previous stage (or this one): a
    change by anyone else stops the step instead of being overwritten. If a crash
    fell between publishing and recording the version, the head already equals the
    stage, and that version is adopted instead of publishing a duplicate.
    """
    store = ctx.store
    sw = store.require(ctx.run_id)
    if getattr(sw, field) is not None:
        return getattr(sw, field)
    req = sw.request
    for _ in range(20):
        head_version, head = _head(ctx.meta)
        found = moved_states(head, req)
        allowed = _expected(req)[field]
        if not found <= allowed:
            raise SwitchError(
                f"{what}: the moved ZSIDs are {sorted(found)} at rules v{head_version}, expected one of "
                f"{sorted(allowed)}: someone else changed them; see `zonesync rules show --history`"
            )
        desired = make(head)
        if desired.to_doc() == head.to_doc():
            version = head_version
            break
        reason = f"switch {ctx.run_id}: {what} ZSIDs {sw.zsids} {sw.from_zone}->{sw.to_zone} ({sw.reason})"
        try:
            # Staged versions are never fully writable, and another switch may be in
            # flight: the moved ZSIDs' owner and status are right by construction.
            version = MetaStore(ctx.meta).publish_rules(
                desired,
                reason,
                ctx.params.actor,
                require_writable=False,
                based_on=head_version,
                lease_holder=ctx.run_id,
                precondition=_still_ours(ctx.run_id, field) if field in PHASE_FOR else None,
            )
            break
        except RulesChanged:
            continue
    else:
        raise SwitchError(f"{what}: the rules kept changing under this step; try again")
    return getattr(store.set_once(ctx.run_id, **{field: version}), field)


# -- the steps -------------------------------------------------------------------
def preflight(ctx: SwitchContext) -> Switch:
    p = ctx.params
    store = ctx.store
    req = plan.SwitchRequest.parse(p.zsids, p.from_zone, p.to_zone, p.reason)
    sw = store.require(ctx.run_id)  # run_step made the row, to record this step in it
    if sw.status != RUNNING:
        raise SwitchError(f"switch {ctx.run_id} already ended ({sw.status}): start a new run")
    _, head = _head(ctx.meta)
    zones = set(MetaStore(ctx.meta).zones())
    if sw.block_version is None:
        plan.validate(req, head, zones)
        # another switch of other ZSIDs may be in flight: no stage can require every ZSID writable
        for stage in (plan.blocked, plan.resharding, plan.activated):
            check(stage(head, req), zones, require_writable=False)
    require_healthy(ctx.meta, ctx.zones)
    _capture_ok(ctx)
    for target in sorted(zones - {p.from_zone}):
        _replication_ok(ctx, target)
    store.acquire_lease(ctx.run_id, list(req.zsids))
    return sw


def _short(result) -> str:
    if isinstance(result, Switch):
        return f"ZSIDs {result.zsids} {result.from_zone}->{result.to_zone} leased to this run"
    return str(result)[:2000]


def binlog_position(conn) -> tuple[str, int] | None:
    try:
        return binlog_end(conn)
    except pymysql.err.MySQLError as exc:
        raise SwitchError(
            f"cannot read the binlog position ({exc}): the zone user needs BINLOG MONITOR / REPLICATION CLIENT"
        ) from None


def _capture_ok(ctx: SwitchContext) -> None:
    """from_zone's replicator is alive: its checkpoint is at the binlog end, or recent.

    Appliers report lag against what reached Kafka, so a dead replicator looks like
    zero lag; wait_sync would then time out with the ZSIDs blocked for nothing."""
    from zonesync.events import file_number

    p = ctx.params
    conn = ctx.zone_conn(p.from_zone)
    try:
        end = binlog_position(conn)
    finally:
        conn.close()
    rows, _ = ctx.meta.run(
        "SELECT log_file, log_pos, TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)) / 1e6 FROM replicator_checkpoints "
        "WHERE zone = %s ORDER BY lsn DESC LIMIT 1",
        (p.from_zone,),
    )
    if not rows:
        raise SwitchError(
            f"zone {p.from_zone} has no replicator checkpoint: start `zonesync replicate --zone {p.from_zone}`"
        )
    log_file, log_pos, age = rows[0]
    at_end = end is None or (file_number(log_file), int(log_pos)) >= (file_number(end[0]), end[1])
    if not at_end and float(age) > max(10.0, 3 * p.lag_threshold_s):
        raise SwitchError(
            f"zone {p.from_zone}'s replicator last checkpointed {float(age):.0f} s ago at {log_file}:{log_pos}, "
            f"behind the binlog end {end[0]}:{end[1]}: is `zonesync replicate --zone {p.from_zone}` running?"
        )


def _replication_ok(ctx: SwitchContext, target: str) -> None:
    """from_zone's stream into `target` is applied, fresh, and not halted anywhere."""
    p = ctx.params
    rows, _ = ctx.meta.run(
        "SELECT COUNT(*), MAX(behind_seconds), MAX(TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6))) / 1e6 "
        "FROM apply_lag WHERE source_zone = %s AND target_zone = %s",
        (p.from_zone, target),
    )
    count, behind, age = rows[0]
    if not count:
        raise SwitchError(
            f"no applier reports zone {p.from_zone}'s stream into zone {target}: "
            f"start `zonesync apply --zone {target}` before switching"
        )
    if float(age) > max(10.0, 3 * p.lag_threshold_s):
        raise SwitchError(f"the applier of zone {target} last reported {float(age):.0f} s ago: is it running?")
    if float(behind) > p.lag_threshold_s:
        raise SwitchError(
            f"zone {target} is {float(behind):.1f} s behind zone {p.from_zone} (threshold "
            f"{p.lag_threshold_s} s): wait for it to catch up (`zonesync lag`)"
        )
    conn = ctx.zone_conn(target)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT partition_no, detail FROM zonesync.apply_state WHERE source_zone = %s AND status = 'halted'",
                (p.from_zone,),
            )
            halted = cur.fetchall()
    finally:
        conn.close()
    if halted:
        raise SwitchError(
            f"zone {target} halted partition(s) {[int(h[0]) for h in halted]} of zone {p.from_zone}'s stream "
            f"({halted[0][1]}): repair replication first (`zonesync alerts`)"
        )


def record_state(ctx: SwitchContext) -> int:
    _running(ctx)
    version, _ = _head(ctx.meta)
    return ctx.store.set_once(ctx.run_id, recorded_version=version).recorded_version


def block(ctx: SwitchContext) -> int:
    sw = _running(ctx)
    if sw.recorded_version is None:
        raise SwitchError("record_state has not run: nothing to roll back to, so nothing may be pushed")
    req = sw.request
    if sw.blocked_at is None:  # stamped before the push: a retry after it never re-checks health
        require_healthy(ctx.meta, ctx.zones)
        ctx.store.stamp_once(ctx.run_id, "blocked_at")
    version = _publish_once(ctx, "block_version", lambda head: plan.blocked(head, req), "BLOCK")
    wait_acks(ctx.meta, version, ctx.zones, ctx.params.ack_timeout_s, unhealthy_too=True)
    ctx.store.stamp_once(ctx.run_id, "block_acked_at")
    return version


def reshard(ctx: SwitchContext) -> int:
    sw = _running(ctx)
    if sw.block_acked_at is None:
        raise SwitchError("block has not completed: RESHARDING may only follow a BLOCK every instance acked")
    req = sw.request
    version = _publish_once(ctx, "reshard_version", lambda head: plan.resharding(head, req), "RESHARDING")
    wait_acks(ctx.meta, version, ctx.zones, ctx.params.ack_timeout_s, unhealthy_too=True)
    ctx.store.stamp_once(ctx.run_id, "resharding_at")  # T
    return version


def sync_position(ctx: SwitchContext) -> tuple[str, int]:
    """P: from_zone's binlog end once no transaction admitted before the block can commit.

    The seed waits T + max transaction time after RESHARDING. No write to the moved
    ZSIDs is admitted anywhere once every instance acked BLOCK, which happens
    earlier, so the same bound holds counted from the BLOCK acks, and the wait
    overlaps the reshard step instead of adding to the write-blocked window. (For
    writes through the guard it is a margin only: its commit-time recheck under
    the version lock already refuses an old-version commit after the ack, S000-27.)
    """
    store = ctx.store
    sw = _running(ctx)
    if sw.resharding_at is None:
        raise SwitchError("reshard has not completed: RESHARDING must be acked before P is taken")
    if sw.sync_file is None:
        while True:  # the meta clock against its own stamps: no skew between hosts (S000-28)
            left_ms = store.ms_until_after_block(ctx.run_id, ctx.params.max_txn_ms)
            if left_ms <= 0:
                break
            time.sleep(min(left_ms, 200) / 1000)
        conn = ctx.zone_conn(ctx.params.from_zone)
        try:
            row = binlog_position(conn)
        finally:
            conn.close()
        if not row:
            raise SwitchError(f"zone {ctx.params.from_zone} has binary logging off: it cannot be switched")
        sw = store.set_once(ctx.run_id, sync_file=row[0], sync_pos=int(row[1]))
    return sw.sync_file, int(sw.sync_pos)


class SyncProbe:
    """Which zones have not yet applied from_zone's stream up to P, asked again and again.

    The wait_sync sensor asks every 20 ms. Each answer needs P, the LSNs per
    partition that cover P (the first replicator checkpoint at or past it) and
    every other zone's apply_state. P and those LSNs never change once known,
    so they are read once; the zones' connections stay open between polls (a
    connection per poll would cost the zones and the meta store a few hundred
    connects a second, on the cores the appliers being waited for run on).
    """

    def __init__(self, ctx: SwitchContext):
        self.ctx = ctx
        self.position: tuple[str, int] | None = None
        self.needed: dict[int, int] | None = None
        self.zones: list[str] | None = None
        self.conns: dict[str, object] = {}
        self.started = time.monotonic()
        self.captured_after: float | None = None  # seconds until a checkpoint covered P

    def behind(self) -> list[str]:
        """Zones still behind P (empty: synced, and synced_at is stamped)."""
        from zonesync.apply.tools.progress import applied_lsns, covers, targets_reached

        ctx = self.ctx
        if self.position is None:
            sw = ctx.store.require(ctx.run_id)
            if sw.sync_file is None:
                raise SwitchError("sync_position has not run: there is no P to wait for")
            self.position = (sw.sync_file, int(sw.sync_pos))
            self.zones = sorted(set(MetaStore(ctx.meta).zones()) - {ctx.params.from_zone})
        if self.needed is None:
            self.needed = targets_reached(ctx.meta, ctx.params.from_zone, self.position)
            if self.needed is None:  # P not captured yet: every zone is behind
                return list(self.zones)
            self.captured_after = time.monotonic() - self.started
        behind = []
        for zone in self.zones:
            try:
                conn = self.conns.get(zone) or self.conns.setdefault(zone, ctx.zone_conn(zone))
                have = applied_lsns(conn, ctx.params.from_zone)
            except pymysql.err.Error:
                self._drop(zone)  # reconnect at the next poll; behind meanwhile
                behind.append(zone)
                continue
            if not covers(have, self.needed):
                behind.append(zone)
        if not behind:
            ctx.store.stamp_once(ctx.run_id, "synced_at")
        return behind

    def _drop(self, zone: str) -> None:
        conn = self.conns.pop(zone, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def close(self) -> None:
        for zone in list(self.conns):
            self._drop(zone)

    def __enter__(self) -> SyncProbe:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def behind_zones(ctx: SwitchContext) -> list[str]:
    """Zones that have not yet applied from_zone's stream up to P (empty: synced)."""
    with SyncProbe(ctx) as probe:
        return probe.behind()


def activate(ctx: SwitchContext) -> int:
    sw = _running(ctx)
    if sw.synced_at is None:
        raise SwitchError("wait_sync has not seen every zone reach P: activating now could lose writes")
    if not ctx.store.claim_phase(ctx.run_id, "activating"):
        raise RollbackStarted("rollback has started for this switch: it is never activated afterwards")
    req = sw.request
    version = _publish_once(ctx, "active_version", lambda head: plan.activated(head, req), "ACTIVE")
    wait_acks(ctx.meta, version, ctx.zones, ctx.params.ack_timeout_s)  # healthy instances; retried on timeout
    sw = ctx.store.stamp_once(ctx.run_id, "activated_at")
    dead = [g for g in list_instances(ctx.meta, ctx.zones) if g.version_applied < version]
    if dead:
        log.warning(
            "activated v%s; not acked by unhealthy instances (they load it when they return): %s",
            version,
            ", ".join(g.instance_id for g in dead),
        )
    return version


def _verify_context(ctx: SwitchContext):
    sw = ctx.store.require(ctx.run_id)
    if sw.activated_at is None:
        raise SwitchError("activate has not completed: nothing to verify")
    _, head = _head(ctx.meta)
    return sw, verify_check.check_context(ctx.meta, ctx.run_id, sw.request, head, MetaStore(ctx.meta).zones(),
                                          ctx.zone_conn)  # fmt: skip


def verify_start(ctx: SwitchContext) -> dict:
    """The consistency check of the moved ZSIDs (switch/verify.py) started: its run, cut and
    positions; what its Spark job (the DAG's verify_check) needs."""
    sw, check_ctx = _verify_context(ctx)
    return verify_check.start(check_ctx, sw.activated_at, sw.recorded_version)


def verify(ctx: SwitchContext, result: dict | None = None) -> dict:
    """The check's result (the verify_check job's) turned into the switch's outcome; the
    lease released either way."""
    sw, check_ctx = _verify_context(ctx)
    if result is None:
        raise SwitchError("verify: no result of the moved ZSIDs' check: run verify_start and verify_check first")
    report = verify_check.outcome(check_ctx, result, sw.request.from_zone)
    summary = f"write-blocked window {sw.window_ms:.0f} ms; verified {report['rows']} rows in {report['tables']} tables"
    if report["differ"] or report.get("detail"):
        detail = (f"{report['differ']} rows differ, e.g. {report['mismatched'][:5]}" if report["differ"]
                  else report["detail"])  # fmt: skip
        ctx.store.finish(ctx.run_id, FAILED, f"activated, but verify found {detail}")
        ctx.store.release_lease(ctx.run_id)
        raise SwitchError(f"verify: {detail}: the switch is active; repair the rows (`zonesync check report "
                          f"{check_ctx.run_id}`), then re-run verify")  # fmt: skip
    ctx.store.finish(ctx.run_id, SUCCEEDED, summary)
    ctx.store.release_lease(ctx.run_id)
    return report


def rollback(ctx: SwitchContext) -> str:
    store = ctx.store
    sw = store.get(ctx.run_id)
    if sw is None:
        return "nothing to roll back: the switch never started (preflight refused it)"
    failed = [s for s in store.steps(sw.id) if s["status"] == "failed"]
    why = "; ".join(f"{s['step']}: {s['detail']}" for s in failed) or "an upstream step failed"
    if sw.status == ROLLED_BACK:
        return sw.detail or "rolled back"
    if not store.claim_phase(ctx.run_id, "rolling_back"):
        return "not rolled back: activate has started (past the point of no return)"
    # Read again: block may have stamped and published between the first read and the
    # claim (it starts alongside the gated steps). No stage but ours is published now.
    sw = store.require(ctx.run_id)
    if sw.blocked_at is None:  # stamped before block's push: nothing was published
        store.finish(ctx.run_id, FAILED, f"refused before any push: {why}")
        store.release_lease(ctx.run_id)
        return f"nothing was pushed; switch failed: {why}"
    recorded = MetaStore(ctx.meta).rules_version(sw.recorded_version)
    req = sw.request
    version = _publish_once(ctx, "rollback_version", lambda head: plan.rolled_back(recorded, head, req), "ROLLBACK")
    outcome = f"rolled back to the rules of v{sw.recorded_version} as v{version} because {why}"
    try:
        wait_acks(ctx.meta, version, ctx.zones, ctx.params.ack_timeout_s, unhealthy_too=True)
    except AckTimeout as exc:
        names = ", ".join(f"{g.instance_id} (zone {g.zone}, v{g.version_applied})" for g in exc.laggards)
        outcome += f"; not acked by {names}: they stay blocked (safe) until keepalive brings them to v{version}"
    store.finish(ctx.run_id, ROLLED_BACK, outcome)
    store.release_lease(ctx.run_id)
    return outcome


STEPS = {
    "preflight": preflight,
    "record_state": record_state,
    "block": block,
    "reshard": reshard,
    "sync_position": sync_position,
    "activate": activate,
    "verify_start": verify_start,
    "verify": verify,
    "rollback": rollback,
}


def run_step(ctx: SwitchContext, step: str, **kw):
    """Run one step (`kw`: what it takes besides the context: verify's check result),
    recording its start, end and outcome in switch_steps."""
    store = ctx.store
    fn = STEPS[step]
    sw = store.get(ctx.run_id)
    if sw is None and step == "preflight":
        # unparseable ZSIDs fail here, before any row exists: nothing changed anywhere
        req = plan.SwitchRequest.parse(ctx.params.zsids, ctx.params.from_zone, ctx.params.to_zone, ctx.params.reason)
        sw = store.create(ctx.run_id, req, ctx.params.actor)
    if sw is None:
        raise SwitchError(f"no switch {ctx.run_id}: preflight did not run")
    store.step_started(sw.id, step)
    try:
        result = fn(ctx, **kw)
    except BaseException as exc:
        store.step_finished(sw.id, step, "failed", f"{type(exc).__name__}: {exc}")
        raise
    store.step_finished(sw.id, step, "ok", _short(result))
    return result
