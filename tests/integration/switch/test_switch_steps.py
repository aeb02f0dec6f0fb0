"""The zone switch protocol step by step, against real zones, replication and guards.

Seed 000 "Zone 切换": each change record's failure cases, rollback, retries, and the
single-writer invariant under a write load. The DAG runs these same functions
(tests/dags/test_zone_switch_dag.py drives them through Airflow).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support import guard_process
from tests.support.replication import behind_replication, checksum, wait_converged
from tests.support.switching import Writers, context, run_switch, verify, wait_replication_reported, wait_sync
from zonesync.meta.guards import AckTimeout
from zonesync.meta.store import MetaStore
from zonesync.rules.extract import RuleIndex
from zonesync.switch import steps
from zonesync.switch.plan import SwitchPlanError
from zonesync.switch.store import ROLLED_BACK, SUCCEEDED, LeaseConflict, SwitchStore

pytestmark = pytest.mark.integration


def _owner(meta, zsid: int) -> tuple[str, str]:
    _, rules = MetaStore(meta).rules_at()
    rule = RuleIndex(rules).rule_for(zsid)
    return rule.zone, rule.status


@pytest.fixture
def switching(cluster, guard_env, meta, zones):
    wait_replication_reported(meta)
    yield
    for holder, *_ in SwitchStore(meta).leases():
        SwitchStore(meta).release_lease(holder)


def test_happy_path_under_load_keeps_one_writer(switching, guard_env, meta, zones):
    ga, gb = guard_env("a", period=0.2), guard_env("b", period=0.2)
    gc = guard_env("c", period=0.2)
    writers = Writers({"a": ga, "b": gb, "c": gc}, range(0, 100), {"a": range(200, 210), "b": range(500, 510)})
    writers.start()
    time.sleep(1.0)
    ctx = context(meta, zones)
    run_switch(ctx)
    time.sleep(1.0)
    writers.finish()

    sw = SwitchStore(meta).require(ctx.run_id)
    assert sw.status == SUCCEEDED and _owner(meta, 5) == ("b", "ACTIVE")
    assert sw.window_ms is not None and sw.window_ms < 5000, sw.window_ms
    assert writers.refused_unmoved == [], "unmoved ZSIDs are never blocked"
    by_zone = writers.moved_by_zone()
    assert by_zone["a"] and by_zone["b"], "moved tenants were written before (a) and after (b) the switch"
    # single writer: every write a accepted committed before any write b accepted began
    assert max(w.committed for w in by_zone["a"]) < min(w.started for w in by_zone["b"])
    sums = wait_converged(zones, ("tenants",))
    rows_b = {r[0]: r for r in sums["tenants"]["b"]}
    assert {r[3] for t, r in rows_b.items() if t < 100} <= {1, 2}, "moved rows come from a (origin 1) or b (2)"
    # the new owner's first write to each moved row started from a's last version of it
    last_a = {w.tenant: w for w in by_zone["a"]}
    for tenant in last_a:
        assert rows_b[tenant][4] > 0
    steps_done = [s["step"] for s in SwitchStore(meta).steps(sw.id)]
    assert steps_done == ["preflight", "record_state", "block", "reshard", "sync_position", "activate",
                          "verify_start", "verify"]  # fmt: skip
    assert SwitchStore(meta).leases() == [], "the lease is released at the end"


def test_record_state_rerun_after_block_keeps_the_pre_switch_version(switching, guard_env, meta, zones):
    guard_env("a", period=0.2), guard_env("b", period=0.2)
    ctx = context(meta, zones)
    steps.run_step(ctx, "preflight")
    before = steps.run_step(ctx, "record_state")
    steps.run_step(ctx, "block")
    assert steps.run_step(ctx, "record_state") == before  # S000-14
    head_before_retry = MetaStore(meta).head()
    assert steps.run_step(ctx, "block") == SwitchStore(meta).require(ctx.run_id).block_version
    assert MetaStore(meta).head() == head_before_retry, "a retried block publishes nothing new"
    steps.run_step(ctx, "rollback")
    assert _owner(meta, 5) == ("a", "ACTIVE")


def test_block_not_acked_by_a_frozen_instance_rolls_back(switching, guard_env, meta, zones):
    """Cases 3.1/3.3: BLOCK never acked; rollback restores a; the frozen one stays safe."""
    guard_env("a", period=0.2)
    proc, instance = guard_process.spawn(meta, zones, "b", 0.3)
    try:
        ctx = context(meta, zones, ack_timeout_s=1.0)
        steps.run_step(ctx, "preflight")
        steps.run_step(ctx, "record_state")
        os.kill(proc.pid, signal.SIGSTOP)
        with pytest.raises(AckTimeout, match=instance):
            steps.run_step(ctx, "block")
        outcome = steps.run_step(ctx, "rollback")
        assert "stay blocked" in outcome and instance in outcome
        sw = SwitchStore(meta).require(ctx.run_id)
        assert sw.status == ROLLED_BACK and "block: AckTimeout" in sw.detail
        assert _owner(meta, 5) == ("a", "ACTIVE")
        os.kill(proc.pid, signal.SIGCONT)  # it returns to the restored version through keepalive
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            rows, _ = meta.run("SELECT version_applied FROM guard_instances WHERE instance_id = %s", (instance,))
            if rows and int(rows[0][0]) >= sw.rollback_version:
                break
            time.sleep(0.05)
        assert int(rows[0][0]) >= sw.rollback_version
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_instance_dead_after_acking_block_fails_reshard(switching, guard_env, meta, zones):
    """Case 3.4: acked BLOCK, then died; reshard gets no ack and rolls back."""
    guard_env("a", period=0.2)
    proc, instance = guard_process.spawn(meta, zones, "b", 0.3)
    ctx = context(meta, zones, ack_timeout_s=1.0)
    for step in ("preflight", "record_state", "block"):
        steps.run_step(ctx, step)
    proc.kill()
    proc.wait()
    with pytest.raises(AckTimeout, match=instance):
        steps.run_step(ctx, "reshard")
    steps.run_step(ctx, "rollback")
    assert _owner(meta, 5) == ("a", "ACTIVE")
    assert SwitchStore(meta).require(ctx.run_id).status == ROLLED_BACK


def test_stopped_applier_times_out_wait_sync_and_rolls_back(switching, cluster, guard_env, meta, zones):
    """S000-30: to_zone behind P; activate never happens."""
    ga = guard_env("a", period=0.2)
    guard_env("b", period=0.2)
    ctx = context(meta, zones)
    for step in ("preflight", "record_state", "block"):
        steps.run_step(ctx, step)
    cluster.stop("applier-b")
    with ga.transaction() as tx:  # an unmoved write after P that b cannot apply now
        tx.insert("tenants", {"tenant_id": 300, "name": "late"})
    steps.run_step(ctx, "reshard")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 301, "name": "before P"})
    steps.run_step(ctx, "sync_position")
    assert wait_sync(ctx, 2.0) == ["b"]
    with pytest.raises(steps.SwitchError, match="wait_sync"):
        steps.run_step(ctx, "activate")
    steps.run_step(ctx, "rollback")
    assert _owner(meta, 5) == ("a", "ACTIVE")
    assert SwitchStore(meta).require(ctx.run_id).active_version is None


def test_activate_retries_until_acked_and_never_rolls_back(switching, guard_env, meta, zones):
    """S000-32: activate fails once (an instance slow to ack), the retry succeeds."""
    guard_env("a", period=0.2)
    proc, instance = guard_process.spawn(meta, zones, "b", 0.5)
    try:
        ctx = context(meta, zones, ack_timeout_s=0.5)
        for step in ("preflight", "record_state", "block", "reshard", "sync_position"):
            steps.run_step(ctx, step)
        assert wait_sync(ctx, 20) == []
        os.kill(proc.pid, signal.SIGSTOP)
        with pytest.raises(AckTimeout):
            steps.run_step(ctx, "activate")
        os.kill(proc.pid, signal.SIGCONT)
        steps.run_step(ctx, "activate")
        assert "not rolled back" in steps.run_step(ctx, "rollback")
        verify(ctx)
        assert _owner(meta, 5) == ("b", "ACTIVE")
        sw = SwitchStore(meta).require(ctx.run_id)
        assert sw.status == SUCCEEDED
        attempts = {s["step"]: s["attempt"] for s in SwitchStore(meta).steps(sw.id)}
        assert attempts["activate"] == 2
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"to_zone": "a"}, "to_zone"),
        ({"from_zone": "x"}, "from_zone"),
        ({"zsids": "1000-1100"}, "zsids"),
        ({"zsids": "300-450"}, "zsids"),  # 400-450 are b's, not a's
        ({"zsids": "9-3"}, "zsids"),
    ],
)
def test_bad_requests_are_refused_before_anything_changes(switching, guard_env, meta, zones, params, field):
    head = MetaStore(meta).head()
    with pytest.raises(SwitchPlanError) as err:
        steps.run_step(context(meta, zones, **params), "preflight")
    assert err.value.field == field
    assert MetaStore(meta).head() == head and SwitchStore(meta).leases() == []


def test_overlapping_switch_is_refused_naming_the_holder(switching, guard_env, meta, zones):
    guard_env("a", period=0.2), guard_env("b", period=0.2)
    first = context(meta, zones, zsids="0-99")
    steps.run_step(first, "preflight")
    with pytest.raises(LeaseConflict, match=first.run_id):
        steps.run_step(context(meta, zones, zsids="50-60"), "preflight")
    steps.run_step(context(meta, zones, zsids="100-120"), "preflight")  # disjoint: fine


def test_preflight_refuses_without_replication_or_when_halted(switching, cluster, guard_env, meta, zones):
    guard_env("a", period=0.2), guard_env("b", period=0.2)
    conn = zones["c"].connect()
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset, status, detail) "
            "VALUES ('a', 99, 0, -1, 'halted', 'test halt') ON DUPLICATE KEY UPDATE status = 'halted'"
        )
    try:
        with pytest.raises(steps.SwitchError, match="zone c halted partition"):
            steps.run_step(context(meta, zones), "preflight")
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync.apply_state WHERE partition_no = 99")
        conn.close()
    meta.run("DELETE FROM apply_lag WHERE source_zone = 'a' AND target_zone = 'b'")
    cluster.stop("applier-b")
    with pytest.raises(steps.SwitchError, match="no applier reports zone a's stream into zone b"):
        steps.run_step(context(meta, zones), "preflight")


def test_verify_names_a_moved_row_changed_behind_replication_and_no_unmoved_one(switching, guard_env, meta, zones):
    """verify is the consistency check restricted to the moved ZSIDs: a moved row changed
    in b behind replication's back fails the switch with the row named; the same damage
    to a row of an unmoved ZSID is not its business; what b writes after activation is
    left out."""
    ga, gb = guard_env("a", period=0.2), guard_env("b", period=0.2)
    with ga.transaction() as tx:
        for tenant in (7, 8, 300):  # ZSIDs 7 and 8 move, 300 stays in a
            tx.insert("tenants", {"tenant_id": tenant, "name": f"tenant {tenant}"})
    wait_converged(zones, ("tenants",))
    ctx = context(meta, zones)
    for step in ("preflight", "record_state", "block", "reshard", "sync_position"):
        steps.run_step(ctx, step)
    assert wait_sync(ctx, 20) == []
    steps.run_step(ctx, "activate")
    with gb.transaction() as tx:  # the new owner's write: on its way back to a, not a difference
        tx.update("tenants", {"tenant_id": 8}, {"name": "b's first"})
    behind_replication(zones["b"], "UPDATE tenants SET name = 'damaged' WHERE tenant_id IN (7, 300)")
    with pytest.raises(steps.SwitchError, match=r"verify: 1 rows differ, e.g. \['tenants\[7\]: b name'\]"):
        verify(ctx)
    sw = SwitchStore(meta).require(ctx.run_id)
    assert sw.status == "failed" and "tenants[7]" in sw.detail and SwitchStore(meta).leases() == []
    from zonesync.check.store import CheckStore

    check = CheckStore(meta).require(f"{ctx.run_id}.verify")
    assert check.zones == ("a", "b") and check.zsids == [(0, 99)] and check.exclude_origin == 2
    # right: the owner before the switch (from_zone's rows are the truth up to P)
    assert [(d["key"], d["right"]) for d in CheckStore(meta).diffs(check.run_id)] == [("[7]", "a")]


def test_rows_move_with_their_versions(switching, guard_env, meta, zones):
    """S000-29: after activate, b's first write to a moved row starts from a's last version."""
    ga, gb = guard_env("a", period=0.2), guard_env("b", period=0.2)
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "from a"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 7}, {"name": "a's last"})
    version_a = checksum(zones["a"])[0][4]
    run_switch(context(meta, zones))
    with gb.transaction() as tx:
        tx.update("tenants", {"tenant_id": 7}, {"name": "b's first"})
    sums = wait_converged(zones, ("tenants",))
    row = sums["tenants"]["a"][0]
    assert row[1] == "b's first" and row[3] == 2 and row[4] > version_a


FORWARD = ("preflight", "record_state", "block", "reshard", "sync_position", "wait_sync", "activate", "verify")


def _run(ctx, step):
    if step == "wait_sync":
        assert wait_sync(ctx, 20) == []
    elif step == "verify":
        verify(ctx)
    else:
        steps.run_step(ctx, step)


@pytest.mark.parametrize(
    ("step", "method", "when"),
    [
        ("record_state", "set_once", "after"),
        ("block", "set_once", "before"),  # published, killed before recording the version
        ("block", "set_once", "after"),  # recorded, killed before the acks came
        ("reshard", "set_once", "before"),
        ("reshard", "stamp_once", "before"),  # acked, killed before T was taken
        ("sync_position", "set_once", "before"),
        ("activate", "set_once", "before"),
        ("activate", "stamp_once", "before"),
        ("verify", "finish", "before"),
        ("rollback", "set_once", "before"),
        ("rollback", "finish", "before"),
    ],
)
def test_a_step_killed_midway_converges_when_retried(
    switching, guard_env, meta, zones, monkeypatch, step, method, when
):  # noqa: E501
    """S000-37: kill a step at its first side effect, run it again: the run ends as an
    uninterrupted one would, with no duplicate version published."""
    guard_env("a", period=0.2), guard_env("b", period=0.2)
    ctx = context(meta, zones)
    head = MetaStore(meta).head()
    path = FORWARD if step != "rollback" else ("preflight", "record_state", "block", "reshard", "rollback")
    for s in path:
        if s == step:
            real = getattr(SwitchStore, method)
            fired: list[bool] = []

            def killed(self, *args, _real=real, fired=fired, **kwargs):
                if not fired:
                    fired.append(True)
                    if when == "after":
                        _real(self, *args, **kwargs)
                    raise RuntimeError("killed")
                return _real(self, *args, **kwargs)

            monkeypatch.setattr(SwitchStore, method, killed)
            with pytest.raises(RuntimeError, match="killed"):
                _run(ctx, s)
            monkeypatch.setattr(SwitchStore, method, real)
            assert fired
        _run(ctx, s)
    sw = SwitchStore(meta).require(ctx.run_id)
    assert MetaStore(meta).head() - head == 3, "block, reshard and activate (or rollback): one version each"
    if step == "rollback":
        assert sw.status == ROLLED_BACK and _owner(meta, 5) == ("a", "ACTIVE")
    else:
        assert sw.status == SUCCEEDED and _owner(meta, 5) == ("b", "ACTIVE")
    assert SwitchStore(meta).leases() == []


def test_kill_9_of_a_block_task_then_retry(switching, guard_env, meta, zones):
    """A real kill -9 of the process running block while it waits for acks."""
    import subprocess
    import sys

    from tests.support.rules import meta_url

    guard_env("a", period=0.2)
    proc, _ = guard_process.spawn(meta, zones, "b", 0.3)
    try:
        ctx = context(meta, zones, ack_timeout_s=30)
        steps.run_step(ctx, "preflight")
        steps.run_step(ctx, "record_state")
        os.kill(proc.pid, signal.SIGSTOP)  # block will publish and then wait
        code = (
            "import sys; from zonesync.meta.db import MetaConfig; from zonesync.switch import steps; "
            "from zonesync.switch.steps import SwitchContext, SwitchParams; "
            f"p = SwitchParams(**{ctx.params.__dict__!r}); "
            f"steps.run_step(SwitchContext(MetaConfig.from_env(), {ctx.run_id!r}, p, None), 'block')"
        )
        env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}
        task = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=guard_process.REPO)
        deadline = time.monotonic() + 20
        while SwitchStore(meta).require(ctx.run_id).block_version is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        task.kill()  # SIGKILL, mid-wait
        task.wait()
        os.kill(proc.pid, signal.SIGCONT)
        head = MetaStore(meta).head()
        version = steps.run_step(ctx, "block")
        assert version == SwitchStore(meta).require(ctx.run_id).block_version and MetaStore(meta).head() == head
        for s in ("reshard", "sync_position", "wait_sync", "activate", "verify"):
            _run(ctx, s)
        assert _owner(meta, 5) == ("b", "ACTIVE")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_leased_zsids_are_not_changed_by_other_publishers(switching, guard_env, meta, zones):
    """A `rules apply` of an older file during a switch is refused, naming the switch."""
    from tests.support.rules import rules_doc
    from zonesync.meta.store import LeasedZsids, RulesChanged

    guard_env("a", period=0.2), guard_env("b", period=0.2)
    ctx = context(meta, zones)
    for step in ("preflight", "record_state", "block"):
        steps.run_step(ctx, step)
    with pytest.raises(LeasedZsids, match=ctx.run_id):
        MetaStore(meta).publish_rules(rules_doc(), "an operator re-applies the baseline")
    head = MetaStore(meta).rules_at()
    with pytest.raises(RulesChanged):  # computed from an older head: refused, not overwritten
        MetaStore(meta).publish_rules(
            head[1], "stale", require_writable=False, based_on=head[0] - 1, lease_holder=ctx.run_id
        )
    steps.run_step(ctx, "rollback")
    MetaStore(meta).publish_rules(rules_doc(), "after the switch ended: allowed")


def test_a_foreign_change_to_moved_zsids_stops_the_switch(switching, guard_env, meta, zones):
    from zonesync.switch import plan

    guard_env("a", period=0.2), guard_env("b", period=0.2)
    ctx = context(meta, zones)
    for step in ("preflight", "record_state", "block"):
        steps.run_step(ctx, step)
    head_version, head = MetaStore(meta).rules_at()
    moved_to_c = plan.activated(head, plan.SwitchRequest(((0, 99),), "a", "c", "x"))
    MetaStore(meta).publish_rules(moved_to_c, "an operator moves them to c", lease_holder=ctx.run_id)
    with pytest.raises(steps.SwitchError, match="someone else changed them"):
        steps.run_step(ctx, "reshard")
    assert _owner(meta, 5) == ("c", "ACTIVE"), "the foreign change is not overwritten"


def test_activate_and_rollback_exclude_each_other(switching, guard_env, meta, zones):
    guard_env("a", period=0.2), guard_env("b", period=0.2)
    ctx = context(meta, zones)
    for step in ("preflight", "record_state", "block", "reshard", "sync_position"):
        steps.run_step(ctx, step)
    assert wait_sync(ctx, 20) == []
    steps.run_step(ctx, "rollback")  # e.g. a cleared task: rollback got there first
    with pytest.raises(steps.SwitchError):
        steps.run_step(ctx, "activate")
    assert _owner(meta, 5) == ("a", "ACTIVE")
    assert SwitchStore(meta).require(ctx.run_id).active_version is None


@pytest.mark.parametrize("late", ["block", "reshard"])
def test_a_stage_published_after_a_rollback_claimed_the_switch_is_refused(switching, guard_env, meta, zones, late):
    """block and reshard start with the gated tasks, so a rollback (a gated task failed) can
    claim the switch while one of them is still running: its push must not land afterwards."""
    guard_env("a", period=0.2), guard_env("b", period=0.2)
    ctx = context(meta, zones)
    for step in ("preflight", "record_state", "block", "reshard")[: 2 if late == "block" else 3]:
        steps.run_step(ctx, step)
    head = MetaStore(meta).head()
    assert SwitchStore(meta).claim_phase(ctx.run_id, "rolling_back")  # the rollback task got there first
    with pytest.raises(steps.RollbackStarted, match=f"{late} is not published"):
        steps.run_step(ctx, late)
    assert MetaStore(meta).head() == head  # nothing published after the claim
    outcome = steps.run_step(ctx, "rollback")
    assert _owner(meta, 5) == ("a", "ACTIVE"), outcome
    assert SwitchStore(meta).leases() == []


def test_replicator_down_during_wait_sync_never_activates(switching, cluster, guard_env, meta, zones):
    """S000-31: P comes from a's MySQL, not from its replicator, so b cannot reach it."""
    ga = guard_env("a", period=0.2)
    guard_env("b", period=0.2)
    ctx = context(meta, zones)
    for step in ("preflight", "record_state", "block", "reshard"):
        steps.run_step(ctx, step)
    cluster.stop("replicator-a")
    with ga.transaction() as tx:  # a write in a that nobody captures now
        tx.insert("tenants", {"tenant_id": 150, "name": "uncaptured"})
    steps.run_step(ctx, "sync_position")
    assert wait_sync(ctx, 2.0) == ["b", "c"]
    with pytest.raises(steps.SwitchError):
        steps.run_step(ctx, "activate")
    steps.run_step(ctx, "rollback")
    assert _owner(meta, 5) == ("a", "ACTIVE")


def test_skewed_guard_clocks_keep_one_writer_and_ordered_versions(switching, guard_env, meta, zones):
    """S000-28: guards an hour ahead (a) and an hour behind (b): the switch waits only on
    the meta clock and monotonic time, and b's writes still outrank a's last versions."""
    from zonesync.dal.hlc import HybridClock

    hour = 3_600_000_000
    ga = guard_env("a", period=0.2, clock=HybridClock(lambda: time.time_ns() // 1000 + hour))
    gb = guard_env("b", period=0.2, clock=HybridClock(lambda: time.time_ns() // 1000 - hour))
    writers = Writers({"a": ga, "b": gb}, range(0, 100), {"a": range(200, 203)})
    writers.start()
    time.sleep(0.5)
    run_switch(context(meta, zones))
    time.sleep(1.0)
    writers.finish()
    by_zone = writers.moved_by_zone()
    assert by_zone["a"] and by_zone["b"]
    assert max(w.committed for w in by_zone["a"]) < min(w.started for w in by_zone["b"])
    sums = wait_converged(zones, ("tenants",))
    for tenant in {w.tenant for w in by_zone["b"]}:
        row = next(r for r in sums["tenants"]["a"] if r[0] == tenant)
        assert row[3] == 2, f"tenant {tenant}: b's write (origin 2) won everywhere despite b's slow clock"
