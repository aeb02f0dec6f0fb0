"""A tenant's locating entities migrated between zones, step by step (migrate/steps.py;
docs/migration.md), on a real mesh with guards writing in both zones."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.support import guard_process, migration_process
from tests.support.background import wait_until
from tests.support.replication import alerts, wait_converged
from zonesync.check.steps import CUT_GRACE_US
from zonesync.dal import EntityWriteStopped, WrongZone
from zonesync.meta import guards
from zonesync.meta.entities import EntityRegistry
from zonesync.migrate import steps
from zonesync.migrate.request import MigrationRefused, MigrationRequest
from zonesync.migrate.store import MigrationStore

pytestmark = pytest.mark.integration


@pytest.fixture
def tenant7(meta):
    """Tenant 7 (with its tenant LE and chat 70) registered in a; no migration recorded."""
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
    meta.run("DELETE FROM migrations")
    version = EntityRegistry(meta).register_biz("tenant", "7", "a", [("tenant", "7"), ("chat", "70")],
                                                "test: tenant 7 in a")  # fmt: skip
    yield version
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")


def _verify(ctx, zones, tmp_path) -> dict:
    """The DAG's verify_start, verify_check (the consistency check's Spark job, in this test
    session's Spark) and verify."""
    from spark_jobs import consistency_check
    from tests.integration.check.conftest import job_args
    from tests.support.spark import session

    started = steps.verify_start(ctx)
    args = job_args(ctx.meta, zones, tmp_path, started["check_run_id"], tables=started["tables"].split(","),
                    settle_timeout_s=30.0, docs=None)  # fmt: skip
    return steps.verify(ctx, consistency_check.run(session(), args))


def _ctx(zones, meta, run_id: str, to: str = "b", mode: str = "plan1", tenant: str = "7") -> steps.MigrationContext:
    return steps.MigrationContext(meta, run_id, MigrationRequest("tenant", tenant, to, mode, "test"),
                                  lambda z: zones[z].connect("zonesync_app"), actor="test")  # fmt: skip


class Writers:
    """A thread per zone inserting tenant 7's orders through its guard as fast as it can;
    each accepted insert kept with the monotonic moments it began and returned."""

    def __init__(self, guards_by_zone: dict):
        self.accepted: dict[str, list[tuple[int, float, float]]] = {z: [] for z in guards_by_zone}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(z, g, 100_000 * (i + 1)), daemon=True)
                        for i, (z, g) in enumerate(guards_by_zone.items())]  # fmt: skip

    def _run(self, zone, guard, base) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            began = time.monotonic()
            try:
                with guard.transaction() as tx:
                    tx.insert("orders", {"order_id": base + n, "tenant_id": 7, "amount": 1})
            except (WrongZone, EntityWriteStopped):
                time.sleep(0.001)  # (pacing the refused: the accepted are the load)
                continue
            self.accepted[zone].append((base + n, began, time.monotonic()))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(30)


def test_a_tenant_moves_with_one_writer_at_every_instant_and_no_write_lost(cluster, guard_env, zones, meta, tenant7,
                                                                           tmp_path):  # fmt: skip
    """Tenant 7 moves a -> b while both zones try to write it: every insert a accepted
    began before the stop-write's acks, every one b accepted returned after the lift
    began, so the two never overlap; every accepted insert is in every zone afterwards;
    the run records its stop-write window; nothing halted."""
    ga, gb = guard_env("a"), guard_env("b")
    guards.wait_acks(meta, tenant7, {"a", "b", "c"}, 10)
    ctx = _ctx(zones, meta, "move-7")
    with Writers({"a": ga, "b": gb}) as w:
        wait_until(lambda: len(w.accepted["a"]) >= 20, 30, "a writes tenant 7")
        assert w.accepted["b"] == []
        steps.preflight(ctx)
        report = _verify(ctx, zones, tmp_path)  # while both zones write: rows in flight excused
        assert report["differ"] == 0 and report["tables"] == 1, report  # orders: the table declaring tenants
        steps.stop_write(ctx)
        stopped = time.monotonic()
        steps.sync_position(ctx)
        wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
        counts = steps.final_check(ctx)
        assert counts["orders"]["a"] == counts["orders"]["b"] >= 20, counts
        steps.flip(ctx)
        lifting = time.monotonic()
        run = steps.lift(ctx)
        wait_until(lambda: len(w.accepted["b"]) >= 20, 30, "b writes tenant 7")
    a_writes, b_writes = w.accepted["a"], w.accepted["b"]
    assert max(began for _, began, _ in a_writes) < stopped <= lifting < min(done for _, _, done in b_writes)
    assert run.status == "succeeded" and run.phase == "lifted" and run.window_ms > 0, run
    assert "2 locating entities moved a -> b; stop-write window" in run.detail
    where = EntityRegistry(meta).biz("tenant", "7")
    assert where[0].zone == "b" and {(le.zone, le.status, le.stop_write) for le in where[1]} == {("b", "ACTIVE", False)}
    wait_converged(zones, ("orders",), timeout=60)
    written = {oid for oid, _, _ in a_writes + b_writes}
    for z in ("a", "b", "c"):
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SELECT order_id FROM orders WHERE tenant_id = 7")
            assert {int(r[0]) for r in cur.fetchall()} == written, z
        assert not alerts(meta, z, "partition_halted")
    assert steps.rollback(ctx, "test").startswith("not rolled back: flip has started")
    assert ctx.store.require("move-7").status == "succeeded"


def test_a_migration_rolled_back_after_its_stop_write_leaves_the_tenant_writable_where_it_was(
    guard_env, zones, meta, tenant7
):  # fmt: skip
    """Stopped, then rolled back: a writes tenant 7 again, b still refuses it, the run is
    rolled back with its reason; a flip after it is refused; a second rollback says so."""
    ga, gb = guard_env("a"), guard_env("b")
    ctx = _ctx(zones, meta, "back-7")
    steps.preflight(ctx)
    steps.stop_write(ctx)
    with pytest.raises(EntityWriteStopped):
        with ga.transaction() as tx:
            tx.insert("orders", {"order_id": 1, "tenant_id": 7, "amount": 1})
    detail = steps.rollback(ctx, "verify found 3 rows differ (test)")
    assert detail.startswith("verify found 3 rows differ (test); writable in a again")
    with ga.transaction() as tx:
        tx.insert("orders", {"order_id": 2, "tenant_id": 7, "amount": 1})
    with pytest.raises(WrongZone, match="owned by zone a"):
        with gb.transaction() as tx:
            tx.insert("orders", {"order_id": 3, "tenant_id": 7, "amount": 1})
    run = ctx.store.require("back-7")
    assert (run.status, run.phase) == ("rolled_back", "rolling_back")
    with pytest.raises(steps.MigrationError):
        steps.flip(ctx)
    assert steps.rollback(ctx, "again") == detail


def test_bad_requests_are_refused_in_one_line_and_record_nothing(guard_env, zones, meta, tenant7):
    guard_env("a")
    cases = [
        (_ctx(zones, meta, "r1", to="x"), "to: unknown zone 'x'; the zones are a, b, c"),
        (_ctx(zones, meta, "r2", to="a"), "to: tenant 7 is in zone a already"),
        (_ctx(zones, meta, "r3", mode="dual-write"), "mode: dual-write is refused"),
        (_ctx(zones, meta, "r4", mode="fast"), "mode: 'fast' is not one of plan1, plan2"),
        (_ctx(zones, meta, "r5", tenant="8"), "tenant: tenant 8 is not a registered biz entity"),
        (_ctx(zones, meta, "r6", tenant="bad id\n"), "tenant: biz entity id 'bad id\\n' must be printable"),
    ]
    for ctx, words in cases:
        with pytest.raises(MigrationRefused) as err:
            steps.preflight(ctx)
        assert str(err.value).startswith(words) and "\n" not in str(err.value), str(err.value)
        assert ctx.store.get(ctx.run_id) is None
    first = steps.preflight(_ctx(zones, meta, "one"))
    assert steps.preflight(_ctx(zones, meta, "one")).id == first.id  # a retried preflight finds its row
    with pytest.raises(MigrationRefused, match="tenant: tenant 7 is being migrated already .one."):
        steps.preflight(_ctx(zones, meta, "two", to="c"))
    assert steps.rollback(_ctx(zones, meta, "one"), "test") == "nothing was pushed; migration failed: test"


def test_a_stop_write_never_lands_after_the_rollback_claimed_the_run(guard_env, zones, meta, tenant7):
    """stop_write read a running run, then the rollback claimed it and found nothing
    pushed: the stop's publish checks the phase in its own commit, so it publishes nothing
    (tenant 7 is not left stopped with nobody to lift it)."""
    guard_env("a")
    ctx = _ctx(zones, meta, "race-7")
    run = steps.preflight(ctx)
    head = EntityRegistry(meta).head()
    assert ctx.store.claim_phase(run.run_id, "rolling_back")
    with pytest.raises(MigrationRefused, match="migration race-7 is running .rolling_back.: nothing published"):
        steps._publish(ctx, run, "a", "STOP_WRITE", "stop", ("preflight",), "stop_version")
    assert EntityRegistry(meta).head() == head and ctx.store.require("race-7").stop_version is None
    assert steps.rollback(ctx, "test") == "nothing was pushed; migration failed: test"
    assert {le.stop_write for le in EntityRegistry(meta).biz("tenant", "7")[1]} == {False}


def test_a_new_le_registered_during_a_run_lands_in_the_target_once_flipped_and_never_before(
    cluster, guard_env, zones, meta, tenant7, capsys
):  # fmt: skip
    """S004-31: a new chat of tenant 7 while it moves a -> b. Up to the flip it cannot be
    registered anywhere (refused in one line saying to wait, nothing published): the
    tenant's unit may still go either way. Once flipped, it is registered at once in b,
    through the CLI (in a or c refused naming b; the run's own chat 70 is the run's): b's
    guard writes it and a's refuses it while the run's LEs are still stopped; the lift and
    the release complete with it ACTIVE in b, and the run's outcome names it."""
    from zonesync import cli
    from zonesync.meta.db import MetaError
    from zonesync.routing import Router

    ga, gb = guard_env("a"), guard_env("b")
    registry = EntityRegistry(meta)
    ctx = _ctx(zones, meta, "grow-7")
    steps.preflight(ctx)
    steps.stop_write(ctx)
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    steps.final_check(ctx)  # verified: the last step before the point of no return
    head = registry.head()
    for zone in ("b", "a"):
        with pytest.raises(MetaError) as err:
            registry.register_biz("tenant", "7", zone, [("chat", "71")], "test: a new chat")
        assert str(err.value) == ("register: tenant 7 is being migrated (grow-7, a -> b) and has not flipped yet: "
                                  "wait for the migration or roll it back, then register again (a new locating "
                                  "entity can be registered in zone b once the run has flipped)")  # fmt: skip
    assert registry.head() == head and registry.locate("chat", "71") is None

    steps.flip(ctx)
    for args, words in [(["--zone", "c", "--le", "chat:71"], "not in c"), (["--zone", "a", "--le", "chat:71"],
                        "not in a"), (["--zone", "b", "--le", "chat:70", "--le", "chat:71"],
                        "chat 70 is registered already (zone b)")]:  # fmt: skip
        assert cli.main(["entity", "register", "tenant", "7", *args, "--reason", "test: a new chat"]) == 2
        err = capsys.readouterr().err
        assert "is being migrated (grow-7, a -> b)" in err and words in err and err.count("\n") == 1, err
    assert registry.locate("chat", "71") is None
    assert cli.main(["entity", "register", "tenant", "7", "--zone", "b", "--le", "chat:71", "--reason",
                     "test: a new chat"]) == 0  # fmt: skip
    assert "registered tenant 7 in zone b with 1 locating entity" in capsys.readouterr().out
    joined = registry.locate("chat", "71")
    assert (joined.zone, joined.status, joined.stop_write) == ("b", "ACTIVE", False)
    assert registry.locate("chat", "70").stop_write  # the run's LEs: stopped until the lift
    guards.wait_acks(meta, joined.version, {"a", "b"}, 10)
    assert gb.state.decide_entity("chat", "71").entity == ("chat", "71")
    with pytest.raises(WrongZone, match="owned by zone b"):
        ga.state.decide_entity("chat", "71")
    assert Router(meta, poll_s=0).where("chat", "71").zone == "b"

    run = steps.lift(ctx)
    assert run.status == "succeeded" and run.detail.endswith("; registered in b during the run: chat 71"), run
    assert steps.release(ctx) == {}  # (no resident table here: nothing to purge)
    biz, les = EntityRegistry(meta).biz("tenant", "7")
    assert (biz.zone, biz.status) == ("b", "ACTIVE")
    assert {(le.le_type, le.le_id, le.zone, le.status, le.stop_write) for le in les} == {
        ("chat", "70", "b", "ACTIVE", False), ("chat", "71", "b", "ACTIVE", False),
        ("tenant", "7", "b", "ACTIVE", False)}  # fmt: skip
    assert run.les == [("chat", "70"), ("tenant", "7")]  # the run moved its own; the new one was never stopped
    assert steps.rollback(ctx, "test").startswith("not rolled back")


def test_an_le_registered_while_preflight_runs_joins_the_run(meta, tenant7):
    """S004-31, the other way in: chat 71 registered in a after preflight read tenant 7's
    LEs but before the run's row exists (no run to refuse it yet). The run's row is made
    with the LEs enumerated again under the head's lock, so chat 71 moves with the tenant;
    one registered elsewhere meanwhile refuses the run, recording nothing."""
    store = MigrationStore(meta)
    seen = [("tenant", "7"), ("chat", "70")]  # what preflight read
    EntityRegistry(meta).register_biz("tenant", "7", "a", [("chat", "71")], "test: a new chat")
    run = store.create("join-7", MigrationRequest("tenant", "7", "b", "plan1", "test"), "a", seen, "test")
    assert sorted(run.les) == [("chat", "70"), ("chat", "71"), ("tenant", "7")]
    store.finish("join-7", "failed", "test")
    EntityRegistry(meta).register_biz("tenant", "7", "c", [("chat", "72")], "test: a new chat", new=True)
    with pytest.raises(MigrationRefused, match=r"tenant: tenant 7's locating entities changed while preflight ran: "
                                               r"chat 72 \(c\) not writable in a; try again"):  # fmt: skip
        store.create("join-8", MigrationRequest("tenant", "7", "b", "plan1", "test"), "a", seen, "test")
    assert store.get("join-8") is None


def _older_than_the_cut(written: float) -> None:
    """verify runs while the tenant is written: a row younger than the check's cut (its
    start less CUT_GRACE_US) is excused as in flight. A span of the protocol on the
    clock, not an event: wait until rows written at `written` are older than it."""
    time.sleep(max(0.0, written + CUT_GRACE_US / 1e6 + 0.1 - time.time()))


def _behind_replications_back(zones, zone: str, sql: str) -> None:
    with zones[zone].connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(sql)
        conn.commit()


def test_a_row_that_differs_fails_verify_before_anything_is_stopped(cluster, guard_env, zones, meta, tenant7,
                                                                     tmp_path):  # fmt: skip
    """One of tenant 7's orders changed in b behind replication's back: verify (before the
    stop) names it and fails; another tenant's row that differs is not the migration's
    business; the rollback finds nothing pushed, so tenant 7 was never stopped."""
    ga = guard_env("a")
    guard_env("b")
    with ga.transaction() as tx:
        for n in range(5):
            tx.insert("orders", {"order_id": 70 + n, "tenant_id": 7, "amount": 1})
        tx.insert("orders", {"order_id": 90, "tenant_id": 9, "amount": 1})
    written = time.time()
    wait_converged(zones, ("orders",), timeout=60)
    _behind_replications_back(zones, "b", "UPDATE orders SET amount = 5 WHERE order_id IN (72, 90)")
    _older_than_the_cut(written)
    ctx = _ctx(zones, meta, "differs-7")
    steps.preflight(ctx)
    with pytest.raises(steps.MigrationError, match=r"verify: 1 rows differ, e.g. \['orders\[72\]: b amount"):
        _verify(ctx, zones, tmp_path)
    with pytest.raises(steps.MigrationError, match="not proven synced"):
        steps.final_check(ctx)
    assert steps.rollback(ctx, "verify failed") == "nothing was pushed; migration failed: verify failed"
    assert {le.stop_write for le in EntityRegistry(meta).biz("tenant", "7")[1]} == {False}


def test_a_row_changed_after_the_stop_fails_the_final_check_and_the_rollback_keeps_the_tenant_in_a(
    cluster, guard_env, zones, meta, tenant7
):  # fmt: skip
    """Writes stopped and b synced, then one of tenant 7's orders deleted in b behind
    replication's back: the final check (counts and checksums pushed down) names the table
    and both zones' numbers, the flip refuses, the rollback leaves tenant 7 writable in a."""
    ga = guard_env("a")
    guard_env("b")
    with ga.transaction() as tx:
        for n in range(5):
            tx.insert("orders", {"order_id": 170 + n, "tenant_id": 7, "amount": 1})
        tx.insert("orders", {"order_id": 190, "tenant_id": 9, "amount": 1})
    ctx = _ctx(zones, meta, "late-7")
    steps.preflight(ctx)
    steps.stop_write(ctx)
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    _behind_replications_back(zones, "b", "DELETE FROM orders WHERE order_id IN (172, 190)")
    with pytest.raises(steps.MigrationError, match=r"final_check: the LEs' rows differ: orders: a 5 rows \(checksum "
                                                   r"\d+\), b 4 rows"):  # fmt: skip
        steps.final_check(ctx)
    with pytest.raises(steps.MigrationError, match="not verified"):
        steps.flip(ctx)
    assert "writable in a again" in steps.rollback(ctx, "final check failed")
    with ga.transaction() as tx:
        tx.insert("orders", {"order_id": 175, "tenant_id": 7, "amount": 1})


def _killed_while_acks_are_held(meta, zones, held_guard, run_id: str, step_names: list[str], recorded: str) -> None:
    """Run `step_names` in a child process while `held_guard` (SIGSTOPped) holds its ack;
    kill -9 the child once the last step's version is recorded, then let the guard go."""
    child = migration_process.spawn(meta, zones, run_id, "7", "b", step_names)
    try:
        wait_until(lambda: getattr(MigrationStore(meta).get(run_id), recorded, None) is not None, 60,
                   f"{recorded} recorded")  # fmt: skip
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        os.kill(held_guard.pid, signal.SIGCONT)


def test_steps_killed_with_kill_9_while_they_wait_for_acks_converge_when_run_again(cluster, guard_env, zones, meta,
                                                                                   tenant7):  # fmt: skip
    """stop_write killed after its publish, waiting for a held ack: run again, it publishes
    nothing new and completes. flip killed the same way (S004-26: between the unit's flip
    and the lift): flip and lift run again and the tenant is writable in b, not left
    stopped; a single version each for stop and flip."""
    ga, gb = guard_env("a"), guard_env("b")
    held, _ = guard_process.spawn(meta, zones, "b", 0.3)
    try:
        os.kill(held.pid, signal.SIGSTOP)  # registered and healthy by its last heartbeat: stop_write waits for it
        _killed_while_acks_are_held(meta, zones, held, "kill-7", ["preflight", "stop_write"], "stop_version")
        ctx = _ctx(zones, meta, "kill-7")
        stop_version = ctx.store.require("kill-7").stop_version
        assert {le.stop_write for le in EntityRegistry(meta).biz("tenant", "7")[1]} == {True}
        head = EntityRegistry(meta).head()
        run = steps.stop_write(ctx)
        assert (run.stop_version, run.phase, EntityRegistry(meta).head()) == (stop_version, "stopped", head)
        steps.sync_position(ctx)
        wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
        steps.final_check(ctx)
        os.kill(held.pid, signal.SIGSTOP)
        _killed_while_acks_are_held(meta, zones, held, "kill-7", ["flip"], "flip_version")
        flip_version = ctx.store.require("kill-7").flip_version
        assert steps.rollback(ctx, "test").startswith("not rolled back: flip has started")
        assert steps.flip(ctx).flip_version == flip_version
        run = steps.lift(ctx)
    finally:
        os.kill(held.pid, signal.SIGCONT)
        held.kill()
        held.wait()
    assert run.status == "succeeded" and run.window_ms > 0, run
    where = EntityRegistry(meta).biz("tenant", "7")
    assert {(le.zone, le.stop_write) for le in where[1]} == {("b", False)}
    rows, _ = meta.run("SELECT COUNT(*) FROM versions WHERE reason LIKE 'migration kill-7: %%'")
    assert rows[0][0] == 3  # stop, flip, lift: once each
    guards.wait_acks(meta, run.lift_version, {"a", "b"}, 10)
    with gb.transaction() as tx:
        tx.insert("orders", {"order_id": 7301, "tenant_id": 7, "amount": 1})
    with pytest.raises(WrongZone):
        with ga.transaction() as tx:
            tx.insert("orders", {"order_id": 7302, "tenant_id": 7, "amount": 1})


def test_the_cli_refuses_a_bad_migration_in_one_line_and_shows_the_runs(guard_env, zones, meta, tenant7, capsys,
                                                                        monkeypatch):  # fmt: skip
    """`zonesync migrate` checks the request against meta before it triggers anything (one
    line naming the flag); `zonesync migrations` and `migrate status` show a run."""
    from zonesync import cli
    from zonesync.cli import common

    monkeypatch.setattr(common, "run_dag", lambda *a, **k: pytest.fail("nothing may be triggered"))
    cases = [
        (["--tenant", "7", "--reason", "r"], "zonesync migrate: --to required (example: --tenant 7 --to b"),
        (["--tenant", "7", "--to", "x", "--reason", "r"], "zonesync migrate: --to: unknown zone 'x'"),
        (["--tenant", "7", "--to", "a", "--reason", "r"], "zonesync migrate: --to: tenant 7 is in zone a already"),
        (["--tenant", "7", "--to", "b", "--reason", "r", "--mode", "dual-write"],
         "zonesync migrate: --mode: dual-write is refused"),
        (["--tenant", "8", "--to", "b", "--reason", "r"], "zonesync migrate: --tenant: tenant 8 is not a registered"),
        (["frobnicate"], "zonesync migrate: unknown arguments 'frobnicate'"),
        (["--tenant", "7", "--to", "b", "--reason", "r", "--stop-window", "2-4"],
         "zonesync migrate: --stop-window: '2-4' is not HH:MM-HH:MM (UTC, e.g. 02:00-04:30)"),
        (["--tenant", "7", "--to", "b", "--reason", "r", "--max-lag-s", "-1"], "zonesync migrate: --max-lag-s: must "),
    ]  # fmt: skip
    for args, message in cases:
        assert cli.main(["migrate", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, err
    guard_env("a")
    steps.preflight(_ctx(zones, meta, "cli-7"))
    assert cli.main(["migrations", "--tenant", "7"]) == 0
    out = capsys.readouterr().out
    assert "running     preflight    7          a->b" in out and "cli-7" in out, out
    assert cli.main(["migrate", "status", "cli-7"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("migration cli-7 (running, preflight): tenant 7 a -> b (plan1)")
    assert "locating entities: chat 70, tenant 7" in out
    assert cli.main(["migrate", "status", "nope"]) == 2
    capsys.readouterr()
    # a second migration of tenant 7 while cli-7 runs: refused by the CLI, nothing triggered
    assert cli.main(["migrate", "--tenant", "7", "--to", "c", "--reason", "r"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zonesync migrate: --tenant: tenant 7 is being migrated already (cli-7)"), err
    steps.rollback(_ctx(zones, meta, "cli-7"), "test")


def test_the_stop_write_gate_opens_only_while_the_target_keeps_up_inside_the_window(cluster, guard_env, zones, meta,
                                                                                     tenant7):  # fmt: skip
    """S004-15: with b's appliers reporting fresh, small lags for a's stream the gate is
    open; one partition far behind, or a window that excludes now, closes it (saying why);
    nothing is stopped either way."""
    import datetime

    guard_env("a")
    ctx = _ctx(zones, meta, "gate-7")
    steps.preflight(ctx)
    wait_until(lambda: steps.gate(ctx, 5.0, "") is None, 30, "b reports keeping up with a")
    meta.run("INSERT INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, "
             "behind_seconds) VALUES ('a', 'b', 99, 0, 5000, 99.0)")  # fmt: skip
    try:
        assert steps.gate(ctx, 5.0, "") == "zone b lags zone a by 99.0 s (more than max_lag_s 5)"
    finally:
        meta.run("DELETE FROM apply_lag WHERE partition_no = 99")
    hour = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)).hour
    window = f"{hour:02d}:00-{(hour + 1) % 24:02d}:00"
    assert steps.gate(ctx, 5.0, window).startswith(f"outside the stop-write window {window} UTC")
    assert ctx.store.require("gate-7").stop_version is None
    steps.rollback(ctx, "test")
