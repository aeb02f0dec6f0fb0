"""Seeds S003-07 (get/ack: the applier crashes before or after committing a batch) and
S002-17 (replay resume: the applier is killed -9 mid-batch): zone b's applier, in a
process of its own, is killed -9 several times under a steady load of zone a's
transactions: while a batch waits mid-transaction, right after a batch committed, and
at a moment when rounds are in flight (as one applier taking every partition, and as a
group member, whose restarts wait out the killed member's session: two kills there).
Each restart seeks from zonesync.apply_state in
zone b, committed with the rows, never from the Kafka consumer group's offsets (which
the applier never commits, and which the test sets to skip everything unapplied before
the last restart). In the end zone b holds exactly zone a's rows and versions, and
`zonesync reconcile` finds every partition's committed event count equal to what zone
a's replicator published: no batch was lost, and none was counted (applied) twice."""

from __future__ import annotations

import random
import time

import pytest

from tests.support import apply_faults
from tests.support.apply_faults import RowLock, committed_events, positions
from tests.support.background import wait_until
from tests.support.loads import TenantLoad
from tests.support.replication import (
    Cluster,
    alerts,
    checksum,
    reset_state,
    row_locks,
    settled_reconciliation,
    wait_same,
)
from tests.support.replicator_process import kill
from zonesync.apply.tools.reconcile import OK
from zonesync.events import partition_of

pytestmark = pytest.mark.integration

PARTITIONS = 4
TENANTS = 300
KEPT = 10
GROUP = "zonesync-apply-b"  # the consumer group the applier of b names (never commits to)


def _load(conn) -> TenantLoad:
    """Zone a's transactions of 1 to 4 rows of tenants 1..TENANTS each (inserts, updates,
    deletes; tenants up to KEPT are never deleted), ever higher versions, one writer thread
    (so a row's versions only grow)."""
    return TenantLoad(conn, seed=7, tenants=TENANTS, max_rows=4, deletes=0.12, kept=KEPT, pause=0.004, commit=True)


@pytest.fixture
def crash_cluster(meta, zones, broker, test_cfg, tmp_path):
    """Zone a's replicator (a thread here); zone b's applier is the test's to spawn and kill."""
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    children = []

    def spawn(group: bool):
        child = apply_faults.spawn(cluster, "b", tmp_path / "applier-b.log", group=group, workers=2, small_round=0)
        children.append(child)
        return child

    cluster.start(which=("replicator",), zones=("a",))
    cluster.wait_started()
    try:
        yield cluster, spawn
    finally:
        for child in children:
            if child.poll() is None:
                kill(child)
        cluster.stop()
        reset_state(zones, meta)


def _progress(zones, since: int, timeout: float = 30) -> int:
    """Wait until zone b committed more of a's events than `since`; how many it has now."""
    wait_until(lambda: committed_events(zones["b"], "a") > since, timeout, "zone b's applier commits batches")
    return committed_events(zones["b"], "a")


def _kill_mid_batch(zones, child) -> None:
    """Kill -9 the applier while one of its batches waits mid-transaction (claimed, not
    committed): a row the load keeps writing is held FOR UPDATE in b, so the batch that
    writes it waits. The batch is rolled back: its partition's position does not move."""
    held = 7
    held_partition = partition_of("tenants", f"[{held}]", PARTITIONS)
    wait_until(lambda: held in {r[0] for r in checksum(zones["b"])}, 30, f"tenant {held} is in zone b")
    with RowLock(zones["b"], "tenants", "tenant_id", [held]) as lock:
        waiter = lock.wait_for_waiter(30, "the applier's batch waits for the held row")
        kill(child)
        killed_at = positions(zones["b"], "a")[held_partition]
    observer = zones["b"].connect()
    try:
        wait_until(lambda: not apply_faults.connection_alive(observer, waiter), 20, "the killed batch's session ends")
    finally:
        observer.close()
    assert positions(zones["b"], "a")[held_partition] == killed_at, (
        "the batch killed mid-transaction was rolled back: its partition's position did not move"
    )


def _kill_after_a_commit(zones, child) -> None:
    """Kill -9 the applier right after it committed a batch (its position is in b, nothing
    acknowledged to Kafka): the next one must start after it, not apply it again."""
    done = committed_events(zones["b"], "a")
    wait_until(lambda: committed_events(zones["b"], "a") > done, 30, "a batch commits")
    kill(child)


def _kill_under_load(zones, child, rnd) -> None:
    """Kill -9 the applier at some moment of the steady load (its workers take every round,
    so rounds are handed out and in flight)."""
    time.sleep(rnd.uniform(0.3, 1.0))
    kill(child)


def _misplace_group_offsets(cluster, zones) -> dict[int, int]:
    """The consumer group never had an offset committed; commit ones that skip every message
    zone b has not applied yet (the topic's end), and return them."""
    topic, bootstrap = cluster.topic("a"), cluster.bootstrap()
    committed = apply_faults.group_offsets(bootstrap, GROUP, topic, PARTITIONS)
    assert all(off < 0 for off in committed.values()), f"the applier committed group offsets: {committed}"
    applied = positions(zones["b"], "a")
    wait_until(
        lambda: any(
            high > applied[p][1] + 1 for p, high in apply_faults.high_watermarks(bootstrap, topic, PARTITIONS).items()
        ),
        20,
        "the topic holds messages zone b has not applied",
    )
    bogus = apply_faults.high_watermarks(bootstrap, topic, PARTITIONS)
    apply_faults.commit_group_offsets(bootstrap, GROUP, topic, bogus)
    assert apply_faults.group_offsets(bootstrap, GROUP, topic, PARTITIONS) == bogus
    return bogus


# A group member's restart waits out the killed member's session (6 s): two kills there.
@pytest.mark.parametrize("group", [False, True], ids=["alone", "group"])
def test_applier_killed_mid_batch_and_after_commits_resumes_from_apply_state(crash_cluster, zones, meta, group):
    cluster, spawn = crash_cluster
    a = zones["a"].connect()
    a.autocommit(False)
    rnd = random.Random(5)
    kills = 0
    try:
        child = spawn(group)
        with _load(a) as load:
            _progress(zones, 0)
            _kill_mid_batch(zones, child)
            kills += 1
            if not group:
                child = spawn(group)
                _progress(zones, committed_events(zones["b"], "a"))
                _kill_after_a_commit(zones, child)
                kills += 1
            child = spawn(group)
            _progress(zones, committed_events(zones["b"], "a"))
            _kill_under_load(zones, child, rnd)
            kills += 1
            bogus = _misplace_group_offsets(cluster, zones)
            child = spawn(group)
            _progress(zones, committed_events(zones["b"], "a"))
            time.sleep(1.0)
        assert load.transactions > 300 and kills == (2 if group else 3)

        # nothing lost: b holds a's rows and versions
        wait_same(zones, "b")
        # nothing applied twice: per partition, b committed as many events as a published
        rows = settled_reconciliation(meta, zones, "b", sources=["a"], timeout=20)
        assert rows and all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
        assert sum(r.committed for r in rows) == sum(r.published for r in rows) > 300
        # the restarts sought from apply_state: following the group's offsets would have
        # skipped messages, a gap, and a resend request
        assert meta.run("SELECT COUNT(*) FROM resend_requests WHERE target_zone = 'b'")[0][0][0] == 0
        assert apply_faults.group_offsets(cluster.bootstrap(), GROUP, cluster.topic("a"), PARTITIONS) == bogus
        assert not alerts(meta, "b", "partition_halted")
        assert row_locks(zones["b"]) == 0
    finally:
        a.close()
