"""Replays: resends from an old checkpoint and a forgotten apply position change nothing."""

from __future__ import annotations

import time

import pytest

from tests.support.replication import ZONES, checksum, wait_converged

pytestmark = pytest.mark.integration


def _history(guard_env, zones):
    ga, gb = guard_env("a"), guard_env("b")
    for i in range(20):
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": i, "name": "v1"})
    for i in range(20):
        with ga.transaction() as tx:
            tx.update("tenants", {"tenant_id": i}, {"name": "v2"})
    for i in range(0, 20, 2):
        with ga.transaction() as tx:
            tx.delete("tenants", {"tenant_id": i})
    with gb.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 401, "name": "b's"})
    return wait_converged(zones, ("tenants",))


def test_resend_everything_from_the_first_checkpoint(cluster, guard_env, zones, meta):
    before = _history(guard_env, zones)
    with meta.connect().cursor() as cur:
        for p in range(cluster.partitions):
            for target in ("b", "c"):
                cur.execute(
                    "INSERT INTO resend_requests (source_zone, target_zone, partition_no, from_lsn) "
                    "VALUES ('a', %s, %s, 0)",
                    (target, p),
                )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with meta.connect().cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM resend_requests WHERE status <> 'done'")
            if cur.fetchone()[0] == 0:
                break
        time.sleep(0.1)
    time.sleep(1.0)
    assert {z: checksum(zones[z]) for z in ZONES} == before["tenants"]


def test_applier_that_forgot_its_position_replays_without_regress_or_resurrection(cluster, guard_env, zones, meta):
    before = _history(guard_env, zones)
    cluster.stop("applier-c")
    with zones["c"].connect().cursor() as cur:
        cur.execute("DELETE FROM zonesync.apply_state")  # every event of a and b arrives again, from offset 0
    cluster.start(which=("applier",), zones=("c",))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with zones["c"].connect().cursor() as cur:
            cur.execute("SELECT COALESCE(SUM(applied_lsn), 0) FROM zonesync.apply_state")
            if cur.fetchone()[0] > 0 and cluster.appliers["c"].applied == 0:
                break
        time.sleep(0.1)
    time.sleep(1.0)
    assert checksum(zones["c"]) == before["tenants"]["c"], "old versions regressed rows or revived deleted ones"
    assert cluster.appliers["c"].applied == 0, "every replayed event must be a no-op"


def test_tombstones_are_collected_after_the_horizon(cluster, guard_env, zones):
    from zonesync.apply.batch.writer import ZoneWriter

    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 1, "name": "x"})
    with ga.transaction() as tx:
        tx.delete("tenants", {"tenant_id": 1})
    wait_converged(zones, ("tenants",))
    writer = ZoneWriter("127.0.0.1", zones["b"].port, "root", "", "zonesync_app")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with zones["b"].connect().cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM zonesync.tombstones")
                if cur.fetchone()[0]:
                    break
            time.sleep(0.1)
        assert writer.gc_tombstones(3600) == 0, "a fresh tombstone is kept"
        with zones["b"].connect().cursor() as cur:
            cur.execute("UPDATE zonesync.tombstones SET deleted_at = NOW(6) - INTERVAL 2 HOUR")
        assert writer.gc_tombstones(3600) == 1
    finally:
        writer.close()
