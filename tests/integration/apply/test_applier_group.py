"""Several appliers into one zone (seeds S002-20, S003-35 to S003-37): with `group` they
share the sources' partitions through a Kafka consumer group, each partition applied by
one of them at a time; a partition moves when a worker joins, leaves or dies, and its
new owner starts from the committed position. Under a steady load across those moves,
zone b ends with exactly zone a's rows and versions."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.support import applier_process
from tests.support.background import wait_until
from tests.support.loads import TenantLoad
from tests.support.replication import row_locks, settled_reconciliation, wait_same

pytestmark = pytest.mark.integration

SOURCES = ("a", "c")


def _owned(applier) -> set:
    return set(applier.book.state)


def _converged(zones, timeout: float = 40) -> None:
    wait_same(zones, "b", timeout=timeout)
    assert row_locks(zones["b"]) == 0, "a move between workers locked a row"


def test_appliers_share_partitions_and_hand_them_over_under_load(zone_a_alone, zones):
    conn, cluster = zone_a_alone
    every = {(s, p) for s in SOURCES for p in range(cluster.partitions)}
    cluster.start(which=("replicator",), zones=("a",))
    cluster.wait_started()
    first = cluster.make_applier("b", group=True)
    cluster.appliers["b"] = first
    cluster._run("applier-b", first)
    wait_until(lambda: _owned(first) == every, 20, "a lone group applier holds every partition")
    second = cluster.make_applier("b", group=True)
    with TenantLoad(conn, seed=11) as load:
        time.sleep(1)
        # S003-37: a second worker joins while the first has rounds in flight
        runner = threading.Thread(target=second.run, kwargs={"max_seconds": 60}, daemon=True)
        runner.start()
        wait_until(lambda: _owned(first) and _owned(second), 20, "both appliers hold partitions")
        assert not _owned(first) & _owned(second), "a partition is applied by two workers"
        assert _owned(first) | _owned(second) == every
        time.sleep(2)
        # S003-35: the first leaves; the second takes everything over
        cluster.stop("applier-b")
        wait_until(lambda: _owned(second) == every, 20, "the leaving worker's partitions moved")
        time.sleep(1)
    try:
        assert load.writes > 500
        _converged(zones)
        assert first.applied > 0 and second.applied > 0
    finally:
        second.stop()
        runner.join(20)


def _a_child_and_a_thread(cluster):
    """Zone a's replicator; zone b's appliers in group mode, one a child process (to kill)
    and one a thread here, sharing the partitions: (every partition, child, thread's)."""
    every = {(s, p) for s in SOURCES for p in range(cluster.partitions)}
    cluster.start(which=("replicator",), zones=("a",))
    cluster.wait_started()
    child = applier_process.spawn(cluster, "b")
    survivor = cluster.make_applier("b", group=True)
    cluster.appliers["b"] = survivor
    time.sleep(1)
    cluster._run("applier-b", survivor)
    wait_until(lambda: _owned(survivor) and _owned(survivor) != every, 30, "the child took partitions")
    return every, child, survivor


def test_a_killed_workers_partitions_move_to_a_live_one(zone_a_alone, zones):
    """S003-35: a worker killed -9 never comes back; after the group's session timeout its
    partitions move to the live worker, which resumes them from the applied LSNs."""
    conn, cluster = zone_a_alone
    every, child, survivor = _a_child_and_a_thread(cluster)
    try:
        with TenantLoad(conn, seed=11):
            time.sleep(2)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
            wait_until(lambda: _owned(survivor) == every, 30, "the dead worker's partitions moved")
            time.sleep(1)
        _converged(zones)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_a_worker_hung_past_its_session_never_commits_over_the_new_owner(zone_a_alone, zones):
    """S003-37: a worker frozen (SIGSTOP) mid-load loses its partitions without a revoke;
    the live worker takes them from the committed positions. When the frozen one wakes,
    whatever it still had in flight fails the position check instead of landing over the
    new owner's commits; it rejoins, and zone b ends exactly equal to zone a."""
    conn, cluster = zone_a_alone
    every, child, survivor = _a_child_and_a_thread(cluster)
    try:
        with TenantLoad(conn, seed=11):
            time.sleep(2)
            os.kill(child.pid, signal.SIGSTOP)
            # the session (6 s) expires, then the mock cluster's rebalance: seen to take up to
            # 23 s after the revoke in fresh-clone CI runs (session 12), 53 s in session 14's;
            # the move's speed is not what this test is about (the protection period has its
            # own test below)
            wait_until(lambda: _owned(survivor) == every, 120, "the frozen worker's partitions moved")
            time.sleep(2)
            os.kill(child.pid, signal.SIGCONT)
            wait_until(lambda: _owned(survivor) != every, 30, "the woken worker rejoined")
            time.sleep(2)
        _converged(zones)
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait(10)


def test_a_worker_restarted_within_the_session_takes_partitions_back_and_applies_nothing_twice(
    zone_a_alone, zones, meta
):
    """S003-34 (a normal deploy): a worker stops (SIGTERM: its rounds in flight commit and it
    leaves the group) and a new process of it starts at once. Its partitions move to the
    live worker and are shared again when it is back; every event is applied exactly once:
    the events apply_state counts per partition equal what the replicator published
    (`zonesync reconcile`), so no batch was applied by both workers or twice by one."""
    from zonesync.apply.tools.reconcile import OK

    conn, cluster = zone_a_alone
    every, child, survivor = _a_child_and_a_thread(cluster)
    restarted = None
    try:
        with TenantLoad(conn, seed=11):
            time.sleep(2)
            child.terminate()
            child.wait(20)
            restarted = applier_process.spawn(cluster, "b")
            wait_until(lambda: _owned(survivor) != every and _owned(survivor), 40, "the restarted worker is back")
            time.sleep(2)
        _converged(zones)
        rows = settled_reconciliation(meta, zones, "b", ["a"], timeout=20)
        assert rows and all(r.status == OK for r in rows), rows
        assert sum(r.committed for r in rows) == sum(r.published or 0 for r in rows) > 0
    finally:
        for proc in (child, restarted):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_a_worker_silent_for_less_than_its_session_keeps_its_partitions(zone_a_alone, zones, meta):
    """S003-34, the protection period (保护期): a worker that stops answering for a while
    shorter than the group's session timeout (6 s; ZONESYNC_APPLY_GROUP_SESSION_S), as in a
    long pause or a network blip, keeps its partitions: nothing is reassigned meanwhile,
    and once it answers again it goes on where it stood. Every event is applied once."""
    from zonesync.apply.tools.reconcile import OK

    conn, cluster = zone_a_alone
    every, child, survivor = _a_child_and_a_thread(cluster)
    mine = set(_owned(survivor))
    moved = []
    try:
        with TenantLoad(conn, seed=11):
            time.sleep(2)
            os.kill(child.pid, signal.SIGSTOP)
            deadline = time.monotonic() + 3.0  # half the session timeout
            while time.monotonic() < deadline:
                if _owned(survivor) != mine:
                    moved.append(sorted(_owned(survivor)))
                time.sleep(0.05)
            os.kill(child.pid, signal.SIGCONT)
            time.sleep(3)
            assert _owned(survivor) == mine, "the silent worker's partitions moved after it answered again"
        assert moved == [], f"partitions moved while the worker was silent within its session: {moved[:3]}"
        _converged(zones)
        rows = settled_reconciliation(meta, zones, "b", ["a"], timeout=20)
        assert rows and all(r.status == OK for r in rows), rows
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait(10)
