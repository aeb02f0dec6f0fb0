"""A replicator whose checkpoint's binlog file was purged (S000-53, S001-08: PURGE BINARY
LOGS, the server's own expiry) publishes nothing, never reads on from the oldest file
left, and raises one alert naming the checkpoint."""

from __future__ import annotations

import time

import pytest

from tests.support.replication import alerts, latest_checkpoint, replicator_alone
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore

pytestmark = pytest.mark.integration


def _purge_past(conn, checkpoint_file: str) -> None:
    """Rotate twice, then purge every file before the newest: the checkpoint's goes."""
    with conn.cursor() as cur:
        for _ in range(2):
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES "
                        "(990001, 'lost', 1, 1) ON DUPLICATE KEY UPDATE _zs_version = _zs_version + 1")  # fmt: skip
        cur.execute("FLUSH ENGINE LOGS")  # the server keeps files its crash recovery needs until then
        cur.execute("SHOW MASTER STATUS")
        newest = cur.fetchone()[0]
        deadline = time.monotonic() + 10
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            if checkpoint_file not in [r[0] for r in cur.fetchall()]:
                return
            assert time.monotonic() < deadline, "the server kept the checkpoint's file"
            time.sleep(0.2)


def _checkpoint_here(conn, meta, lsn: int) -> tuple[str, int]:
    """Zone a's checkpoint at LSN `lsn` (partition 0 too) where its binlog ends now."""
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    store = CheckpointStore(meta, "a")
    try:
        store.save(Checkpoint("a", lsn, file, int(pos), {0: lsn}, lsn))
    finally:
        store.close()
    return file, int(pos)


def test_a_purged_checkpoint_file_stops_the_replicator_with_an_alert(zone_a_alone, meta):
    conn, cluster = zone_a_alone
    try:
        file, pos = _checkpoint_here(conn, meta, 1)
        _purge_past(conn, file)
        with meta.connect().cursor() as cur:
            cur.execute("DELETE FROM alerts WHERE kind = 'binlog_unreadable'")

        replicator = replicator_alone(cluster, "a")
        assert replicator.published == 0, "nothing read on from the oldest file left"
        found = alerts(meta, "a", "binlog_unreadable")
        assert len(found) == 1, "one alert, however often it asks again"
        assert found[0]["checkpoint"] == f"{file}:{pos}"
        assert latest_checkpoint(meta, "a").log_file == file, "the checkpoint does not move past the lost file"
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id = 990001")


def test_skip_lost_moves_the_checkpoint_past_the_lost_file_and_capture_goes_on(zone_a_alone, meta, capsys):
    """S000-53's cure: the operator gives the lost changes up (`zonesync binlog skip-lost`);
    the checkpoint moves to the binlog's end with its LSNs, an alert says so and names the
    repair copies, and the replicator publishes what a writes next, continuing the chain.
    Refused, changing nothing, while the checkpoint's file is still on the server."""
    from zonesync import cli

    conn, cluster = zone_a_alone
    try:
        file, pos = _checkpoint_here(conn, meta, 7)
        assert cli.main(["binlog", "skip-lost", "--zone", "a", "--reason", "test"]) == 1
        assert "is still on the server" in capsys.readouterr().out
        assert latest_checkpoint(meta, "a").log_file == file, "a refusal moves nothing"

        _purge_past(conn, file)
        assert cli.main(["binlog", "skip-lost", "--zone", "a", "--reason", "restore failed"]) == 0
        out = capsys.readouterr().out
        assert "zonesync copy --from a --to b --mode repair" in out and "--to c" in out, out
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            end = cur.fetchone()[:2]
        moved = latest_checkpoint(meta, "a")
        assert (moved.log_file, moved.log_pos, moved.lsn, moved.partition_lsns) == (end[0], int(end[1]), 7, {0: 7})
        skipped = alerts(meta, "a", "binlog_skipped")[-1]
        assert skipped["from"] == f"{file}:{pos}" and skipped["to"] == f"{end[0]}:{end[1]}" and skipped["lsn"] == 7

        with conn.cursor() as cur:  # a's next write: published, the chain going on from LSN 7
            cur.execute("INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES "
                        "(990002, 'after', 1, 1)")  # fmt: skip
        replicator = replicator_alone(cluster, "a")
        assert replicator.published >= 1, "capture goes on from the new position"
        assert latest_checkpoint(meta, "a").lsn > 7
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id IN (990001, 990002)")
