"""Replicator checkpoint history: thinning, and positions that end no transaction."""

from __future__ import annotations

import pytest

from zonesync.apply.tools.progress import wait_applied
from zonesync.capture import checkpoints
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore

pytestmark = pytest.mark.integration


def test_prune_keeps_recent_ones_and_one_per_minute_before(meta, monkeypatch):
    monkeypatch.setattr(checkpoints, "HISTORY_KEEP", 50)
    zone = "zp"
    meta.run("DELETE FROM replicator_checkpoints WHERE zone = %s", (zone,))
    conn = meta.connect()
    with conn.cursor() as cur:  # 200 checkpoints, 10 per minute over 20 minutes
        cur.executemany(
            "INSERT INTO replicator_checkpoints (zone, lsn, log_file, log_pos, partition_lsns, published_hwm, "
            "created_at) VALUES (%s, %s, 'binlog.000001', %s, %s, %s, NOW(6) - INTERVAL %s SECOND)",
            [(zone, n, 1000 + n, f'{{"0": {n}}}', n, (200 - n) * 6) for n in range(1, 201)],
        )
    conn.close()
    store = CheckpointStore(meta, zone)
    try:
        store.prune()
        kept = [cp.lsn for cp in store.history()]
        assert kept[0] == 1, "the chain's first checkpoint stays"
        assert kept[-50:] == list(range(151, 201)), "the newest HISTORY_KEEP stay"
        older = kept[1:-50]
        assert 14 <= len(older) <= 17, older  # about one per minute of the ~15 older minutes
        cp = store.for_resend(0, 75)
        assert cp is not None and cp.partition_lsns[0] <= 75, "a resend can still reach back"
        assert store.first_at_or_past("binlog.000001", 1180).lsn == 180
        assert store.first_at_or_past("binlog.000002", 4) is None
        store.save(Checkpoint(zone, 201, "binlog.000002", 4, {0: 201}, 201))
        assert store.first_at_or_past("binlog.000002", 4).lsn == 201
    finally:
        store.close()
        meta.run("DELETE FROM replicator_checkpoints WHERE zone = %s", (zone,))


def test_position_after_ddl_is_reached_on_a_quiet_zone(cluster, guard_env, zones, meta):
    """P read right after a DDL (no transaction ends there): the idle replicator moves its
    checkpoint to the server's position, so wait_applied(P) succeeds without more writes."""
    with guard_env("a").transaction() as tx:
        tx.insert("tenants", {"tenant_id": 1, "name": "x"})
    conn = zones["a"].connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS ddl_probe (id INT PRIMARY KEY)")
            cur.execute("SHOW MASTER STATUS")
            position = cur.fetchone()[:2]
        target = zones["b"].connect("zonesync_app")
        try:
            assert wait_applied(meta, target, "a", (position[0], int(position[1])), timeout=10)
        finally:
            target.close()
    finally:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS ddl_probe")
        conn.close()
