"""Faults inside a migration's cutover (migrate/steps.py; docs/migration.md; seed 004's
steps 6, 7 and 9): a target applier killed -9 while it applies the tenant's resident rows
(S004-22), a writer committing late around the stop-write (S004-20), and one guard
holding its ack of the flip (S004-25)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.integration.migrate.conftest import forget_tenants
from tests.integration.migrate.test_resident_tables import _ctx, _note
from tests.support import apply_faults, guard_process
from tests.support.apply_faults import RowLock, committed_events, positions
from tests.support.background import wait_until
from tests.support.replication import Cluster, alerts, reset_state, row_locks, settled_reconciliation
from tests.support.replicator_process import kill
from zonesync.apply.tools.reconcile import OK
from zonesync.dal import EntityWriteStopped, TransactionDeadlineExceeded, WrongZone
from zonesync.meta import guards
from zonesync.meta.entities import EntityRegistry
from zonesync.migrate import steps
from zonesync.migrate.request import MigrationRequest

pytestmark = pytest.mark.integration


def _acked_everywhere(meta) -> None:
    guards.wait_acks(meta, EntityRegistry(meta).head(), {"a", "b", "c"}, 10)


def _bodies(inst, tenant: int = 7) -> dict[int, str]:
    with inst.connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SELECT note_id, body FROM notes WHERE tenant_id = %s", (tenant,))
        return {int(i): b for i, b in cur.fetchall()}


def _versions(inst, tenant: int = 7) -> dict[int, int]:
    with inst.connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SELECT note_id, _zs_version FROM notes WHERE tenant_id = %s", (tenant,))
        return {int(i): int(v) for i, v in cur.fetchall()}


class NoteLoad:
    """A thread writing tenant 7's notes through a guard until it is refused: each
    transaction inserts one, every third also updates the newest, every fifth deletes the
    oldest. `rows` is what was committed (note id -> body), changed only once a commit
    returned; `refused` the refusal that ended it."""

    def __init__(self, guard, first: int = 1):
        self.guard, self.next = guard, first
        self.rows: dict[int, str] = {}
        self.commits = 0
        self.refused: Exception | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self.done.is_set():
                n, ids = self.next, sorted(self.rows)
                changed = {n: f"new {n}"}
                gone = None
                with self.guard.transaction() as tx:
                    tx.insert("notes", {"note_id": n, "tenant_id": 7, "body": changed[n]})
                    if n % 3 == 0 and ids:
                        changed[ids[-1]] = f"updated by {n}"
                        tx.update("notes", {"note_id": ids[-1]}, {"body": changed[ids[-1]]})
                    if n % 5 == 0 and len(ids) > 1:
                        gone = ids[0]
                        tx.delete("notes", {"note_id": gone})
                self.rows.update(changed)
                self.rows.pop(gone, None)
                self.commits += 1
                self.next += 1
                time.sleep(0.002)
        except (WrongZone, EntityWriteStopped, TransactionDeadlineExceeded) as exc:
            self.refused = exc
        finally:
            self.done.set()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(30)


@pytest.fixture
def b_apart(notes, meta, zones, broker, test_cfg, tmp_path):
    """Replication between a, b, c on fresh topics, zone b's applier in a process of its own
    (spawn() starts one, the test kills it -9); the other workers are threads."""
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, check_owners=True)
    cluster.start(which=("replicator",))
    cluster.start(which=("applier",), zones=("a", "c"))
    cluster.wait_started()
    children = []

    def spawn():
        children.append(apply_faults.spawn(cluster, "b", tmp_path / "applier-b.log", workers=2, small_round=0))
        return children[-1]

    try:
        yield spawn
    finally:
        for child in children:
            if child.poll() is None:
                kill(child)
        cluster.stop()
        reset_state(zones, meta)


def test_a_target_applier_killed_mid_apply_holds_synced_back_and_nothing_is_lost_or_applied_twice(
    b_apart, guard_env, zones, meta
):
    """S004-22: tenant 7's notes stream to b once admitted. b's applier is killed -9 while a
    writes them, a burst is committed in a meanwhile, the stop and P follow: synced does not
    pass, nor does the final check. Restarted, it is killed -9 again after applying part of
    the burst, one batch mid-transaction (it waits for a held note): still not synced, the
    held note as it was. Restarted once more, synced passes; the final check finds b == a,
    the flip and the lift go through; every note a committed is in b as committed, each
    partition's events counted once."""
    spawn = b_apart
    ga, gb = guard_env("a"), guard_env("b")
    _acked_everywhere(meta)
    child = spawn()
    ctx = _ctx(zones, meta, "crash-22")
    steps.preflight(ctx)
    assert steps.admit(ctx)["tables"] == "notes"  # (no note yet: nothing for a stock copy, all by the stream)
    with NoteLoad(ga) as load:
        wait_until(lambda: len(_bodies(zones["b"])) >= 30, 30, "b applies tenant 7's notes from a's stream")
        kill(child)
        burst = load.commits
        wait_until(lambda: load.commits >= burst + 200 or load.done.is_set(), 30, "a commits a burst, b's applier down")
        at_kill = positions(zones["b"], "a")  # (read after the burst: a COMMIT the kill left in flight has landed)
        steps.stop_write(ctx)
        assert load.done.wait(10)
    assert isinstance(load.refused, EntityWriteStopped), load.refused
    steps.sync_position(ctx)
    assert not steps.synced(ctx)
    assert positions(zones["b"], "a") == at_kill  # nothing applied while it was down
    with pytest.raises(steps.MigrationError, match="not proven synced"):
        steps.final_check(ctx)

    # a note b holds that the burst changed or deleted in a: its batch waits for it in b
    in_a, in_b = _versions(zones["a"]), _versions(zones["b"])
    held = min(i for i, v in in_b.items() if in_a.get(i, 0) != v)
    with RowLock(zones["b"], "notes", "note_id", [held]) as lock:
        child = spawn()
        waiter = lock.wait_for_waiter(30, "b's applier's batch waits for the held note")
        # its other worker's partitions (p % workers) commit their share of the burst meanwhile
        wait_until(lambda: committed_events(zones["b"], "a") > sum(n for _, _, n, _ in at_kill.values()), 30,
                   "b applies part of the burst")  # fmt: skip
        kill(child)
    observer = zones["b"].connect()
    try:
        wait_until(lambda: not apply_faults.connection_alive(observer, waiter), 20, "the killed batch's session ends")
    finally:
        observer.close()
    assert not steps.synced(ctx)
    assert _versions(zones["b"]).get(held) == in_b[held]  # its batch was rolled back whole

    spawn()
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    counts = steps.final_check(ctx)
    assert counts["notes"]["a"] == counts["notes"]["b"] == len(load.rows) > 150, counts
    steps.flip(ctx)
    run = steps.lift(ctx)
    assert run.status == "succeeded", run
    assert _bodies(zones["a"]) == _bodies(zones["b"]) == load.rows  # every accepted write, as committed
    rows = settled_reconciliation(meta, zones, "b", sources=["a"], timeout=20)
    assert rows and all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
    assert not alerts(meta, "b", "partition_halted") and not alerts(meta, "b", "row_locked")
    assert row_locks(zones["b"]) == 0
    guards.wait_acks(meta, run.lift_version, {"a", "b"}, 10)
    _note(gb, 900_000, 7)
    with pytest.raises(WrongZone):
        _note(ga, 900_001, 7)


class OpenTransaction:
    """A guarded transaction that wrote one of tenant 7's notes and is left open; commit()
    later (the guard's commit: its rechecks, then COMMIT)."""

    def __init__(self, guard, note_id: int):
        self._cm = guard.transaction()
        self.tx = self._cm.__enter__()
        self.tx.insert("notes", {"note_id": note_id, "tenant_id": 7, "body": "late"})
        self.error: Exception | None = None
        self.thread: threading.Thread | None = None

    def commit(self) -> None:
        self._cm.__exit__(None, None, None)

    def close(self) -> None:
        """Rolled back unless it ended (a test that failed early: its locks would outlive it)."""
        if self.thread is not None:
            self.thread.join(10)
        if not self.tx.done:
            self._cm.__exit__(RuntimeError, RuntimeError("the test ended"), None)

    def commit_in_thread(self) -> threading.Thread:
        def run():
            try:
                self.commit()
            except Exception as exc:  # noqa: BLE001 - kept for the test's assertion
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self.thread


def _waits_in_commit(inst, thread_id: int) -> bool:
    with inst.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = %s AND INFO = 'COMMIT'", (thread_id,))
        row = cur.fetchone()
        return bool(row and row[0].startswith("Waiting for"))


def _applied(meta, instance_id: str) -> int:
    rows, _ = meta.run("SELECT version_applied FROM guard_instances WHERE instance_id = %s", (instance_id,))
    return int(rows[0][0])


def test_a_late_commit_is_refused_after_the_stop_s_ack_and_one_already_committing_holds_the_ack(
    notes, cluster, guard_env, zones, meta
):
    """S004-20: three of a's guarded transactions wrote one of tenant 7's notes each before
    the stop-write was pushed. One's COMMIT is held in the server (BACKUP STAGE
    BLOCK_COMMIT) past the stop's publish: a's guard does not ack the stop until it
    returns, so it is before P and in b after synced. One commits after the ack and
    max_txn_ms, within its deadline: the guard's recheck refuses it. One commits after the
    rules' transaction deadline: refused by the deadline. Neither refused note is in a or
    b; after the flip b holds exactly what a committed."""
    ga, _ = guard_env("a"), guard_env("b")
    _acked_everywhere(meta)
    ctx = _ctx(zones, meta, "late-20")
    steps.preflight(ctx)
    steps.admit(ctx)  # b applies tenant 7's notes from a's stream from now on
    for n in range(1, 6):
        _note(ga, n, 7)
    expired = OpenTransaction(ga, 12)  # opened first: it is over its deadline first
    held, late = OpenTransaction(ga, 10), OpenTransaction(ga, 11)
    try:
        blocker = zones["a"].connect()
        try:
            with blocker.cursor() as cur:
                cur.execute("BACKUP STAGE START")
                cur.execute("BACKUP STAGE BLOCK_COMMIT")  # no COMMIT in zone a completes
            committing = held.commit_in_thread()
            wait_until(lambda: _waits_in_commit(zones["a"], held.tx.conn.thread_id()), 10, "note 10's COMMIT waits")
            stopping = threading.Thread(target=steps.stop_write, args=(ctx,), daemon=True)
            stopping.start()
            version = wait_until(lambda: ctx.store.require("late-20").stop_version, 10, "the stop is published")
            others = [g.instance_id for g in guards.list_instances(meta) if g.instance_id != ga.instance_id]
            wait_until(lambda: all(_applied(meta, i) >= version for i in others), 10, "every other guard acks the stop")
            wait_until(lambda: ga.lock._waiting_writers, 10, "a's guard waits to swap in the stop")
            assert _applied(meta, ga.instance_id) < version and stopping.is_alive() and committing.is_alive()
            assert 10 not in _bodies(zones["a"])
            with blocker.cursor() as cur:
                cur.execute("BACKUP STAGE END")
        finally:
            blocker.close()
        committing.join(10)
        stopping.join(20)
        assert held.error is None and not stopping.is_alive()
        assert _applied(meta, ga.instance_id) >= version and ctx.store.require("late-20").phase == "stopped"
        steps.sync_position(ctx)  # P, max_txn_ms after the acks
        with pytest.raises(EntityWriteStopped):
            late.commit()  # within its deadline: the commit's recheck sees the stop
        time.sleep(max(0.0, expired.tx.started + 2.1 - time.monotonic()))  # the rules' txn_deadline_ms, 2000: a span
        with pytest.raises(TransactionDeadlineExceeded):
            expired.commit()
    finally:
        for open_tx in (expired, held, late):
            open_tx.close()
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    committed = {1, 2, 3, 4, 5, 10}
    assert set(_bodies(zones["a"])) == set(_bodies(zones["b"])) == committed
    assert steps.final_check(ctx)["notes"] == {"a": 6, "b": 6}
    steps.flip(ctx)
    assert steps.lift(ctx).status == "succeeded"
    assert _bodies(zones["a"]) == _bodies(zones["b"]) and set(_bodies(zones["b"])) == committed


def test_a_commit_its_guard_lost_lands_after_the_stop_s_ack_within_max_txn_ms_and_reaches_the_target(
    notes, cluster, guard_env, zones, meta
):
    """S004-20, a writer outside the guard's commit recheck: a guard whose link to zone a
    is cut while its COMMIT is slow in the server (binlog group commit held 2 s) sees the
    connection lost, lets go and acks the stop; the server commits the note after that ack
    all the same. It lands within max_txn_ms of the acks, so before P: b has it once
    synced, and after the flip a and b hold the same notes."""
    import pymysql

    from tests.support.tcp_proxy import TcpProxy
    from zonesync.dal import Guard, ZoneDB

    guard_env("a")
    guard_env("b")
    proxy = TcpProxy(zones["a"].port).start()
    cut_off = Guard(meta, "a", ZoneDB("127.0.0.1", proxy.port, "root", "", "zonesync_app"), period=0.5, poll=0.05)
    cut_off.start()
    _acked_everywhere(meta)
    ctx = steps.MigrationContext(meta, "orphan-20", MigrationRequest("tenant", "7", "b", "plan1", "test"),
                                 lambda z: zones[z].connect("zonesync_app"), actor="test", max_txn_ms=2500)  # fmt: skip
    steps.preflight(ctx)
    steps.admit(ctx)
    _note(cut_off, 1, 7)
    orphan = OpenTransaction(cut_off, 20)
    root = zones["a"].connect()
    with root.cursor() as cur:
        cur.execute("SELECT @@global.binlog_commit_wait_count, @@global.binlog_commit_wait_usec")
        before = cur.fetchone()
    try:
        with root.cursor() as cur:  # every COMMIT in zone a waits 2 s for a group to form
            cur.execute("SET GLOBAL binlog_commit_wait_count = 1000, GLOBAL binlog_commit_wait_usec = 2000000")
        orphan.commit_in_thread()
        stopping = threading.Thread(target=steps.stop_write, args=(ctx,), daemon=True)
        stopping.start()
        wait_until(lambda: cut_off.lock._waiting_writers, 10, "the cut-off guard waits to swap in the stop")
        proxy.cut()
        stopping.join(10)
        assert isinstance(orphan.error, pymysql.err.OperationalError) and not stopping.is_alive(), orphan.error
        assert 20 not in _bodies(zones["a"])  # acked; its COMMIT still under way in the server
        steps.sync_position(ctx)  # P, read max_txn_ms after the acks
        assert 20 in _bodies(zones["a"])  # the server committed it meanwhile, after the ack
    finally:
        with root.cursor() as cur:
            cur.execute("SET GLOBAL binlog_commit_wait_count = %s, GLOBAL binlog_commit_wait_usec = %s", before)
        root.close()
        orphan.close()
        cut_off.close()
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    assert set(_bodies(zones["b"])) == {1, 20}  # before P: in b once synced
    assert steps.final_check(ctx)["notes"] == {"a": 2, "b": 2}
    steps.flip(ctx)
    assert steps.lift(ctx).status == "succeeded"
    assert _bodies(zones["a"]) == _bodies(zones["b"])


@pytest.fixture
def tenant7(meta):
    """Tenant 7 (its tenant LE) registered in a, no migration recorded; the version."""
    forget_tenants(meta)
    yield EntityRegistry(meta).register_biz("tenant", "7", "a", [("tenant", "7")], "test: tenant 7 in a")
    forget_tenants(meta)


def test_the_lift_waits_for_a_guard_holding_its_ack_of_the_flip(cluster, guard_env, zones, meta, tenant7):
    """S004-25: one of a's guards (its own process, healthy by its heartbeats) is frozen
    with SIGSTOP before the flip. The flip publishes b as the unit; every other guard acks
    it, this one does not: the lift publishes nothing and tenant 7 is refused in a and in
    b all the while. SIGCONT: it acks the flip, and only then the lift is published; it
    completes, b writes tenant 7 and a refuses it."""
    ga, gb = guard_env("a"), guard_env("b")
    frozen, instance = guard_process.spawn(meta, zones, "a", 2.0)  # unhealthy only after 8 s without a heartbeat
    cutover: dict = {}

    def flip_and_lift():  # the cutover task's last two steps
        try:
            steps.flip(ctx)
            cutover["run"] = steps.lift(ctx)
        except Exception as exc:  # noqa: BLE001 - kept for the test's assertion
            cutover["error"] = exc

    try:
        guards.wait_acks(meta, tenant7, {"a", "b", "c"}, 10)
        ctx = _ctx(zones, meta, "held-25")
        steps.preflight(ctx)
        steps.stop_write(ctx)
        steps.sync_position(ctx)
        wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
        steps.final_check(ctx)
        os.kill(frozen.pid, signal.SIGSTOP)
        thread = threading.Thread(target=flip_and_lift, daemon=True)
        thread.start()
        flip = wait_until(lambda: ctx.store.require("held-25").flip_version, 10, "the flip is published")
        others = [g.instance_id for g in guards.list_instances(meta) if g.instance_id != instance]
        wait_until(lambda: all(_applied(meta, i) >= flip for i in others), 10, "every other guard acks the flip")
        held_until = time.monotonic() + 1.0  # (the flip's wait polls every 20 ms: 50 looks at the acks)
        while time.monotonic() < held_until:
            assert ctx.store.require("held-25").lift_version is None and thread.is_alive()
            for guard in (ga, gb):
                with pytest.raises(EntityWriteStopped):
                    with guard.transaction() as tx:
                        tx.insert("orders", {"order_id": 2500, "tenant_id": 7, "amount": 1})
            time.sleep(0.1)
        sick = {g.instance_id: g for g in guards.list_instances(meta)}[instance]
        assert sick.healthy and sick.version_applied < flip, sick  # healthy, and holding its ack
        os.kill(frozen.pid, signal.SIGCONT)
        thread.join(30)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
        frozen.kill()
        frozen.wait()
    assert "error" not in cutover, cutover
    run = cutover["run"]
    assert run.status == "succeeded" and run.lift_version > run.flip_version, run
    rows, _ = meta.run("SELECT a.acked_at <= v.created_at FROM guard_acks a JOIN versions v ON v.version = %s "
                       "WHERE a.instance_id = %s AND a.version = %s", (run.lift_version, instance, flip))  # fmt: skip
    assert len(rows) == 1 and rows[0][0] == 1, rows  # the lift was published after the frozen guard acked the flip
    guards.wait_acks(meta, run.lift_version, {"a", "b"}, 10)
    with gb.transaction() as tx:
        tx.insert("orders", {"order_id": 2501, "tenant_id": 7, "amount": 1})
    with pytest.raises(WrongZone):
        with ga.transaction() as tx:
            tx.insert("orders", {"order_id": 2502, "tenant_id": 7, "amount": 1})
