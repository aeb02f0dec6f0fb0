"""Binlog retention (S001-06, Pegasus's delay GC): safe-purge removes only files that
no consumer can need again, the slowest target zone holds the rest, and naming a
still-needed file is refused."""

from __future__ import annotations

import time

import pytest

from tests.support.replication import reset_state
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.capture.purge import needed_file, safe_purge

pytestmark = pytest.mark.integration


def _files(conn) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [r[0] for r in cur.fetchall()]


def _rotate(conn, n: int) -> list[tuple[str, int]]:
    """n fresh binlog files, one row in each; the position after each file's row."""
    out = []
    with conn.cursor() as cur:
        for i in range(n):
            cur.execute("FLUSH BINARY LOGS")
            cur.execute(
                "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, 'p', 1, 1)",
                (900_000 + i,),
            )
            cur.execute("SHOW MASTER STATUS")
            f, pos = cur.fetchone()[:2]
            out.append((f, int(pos)))
        # the server keeps a file until the engine has flushed its commits: wait for the binlog
        # checkpoint that names the last file
        cur.execute("FLUSH ENGINE LOGS")
        deadline = time.monotonic() + 10
        while True:
            cur.execute(f"SHOW BINLOG EVENTS IN '{out[-1][0]}'")
            if any(r[2] == "Binlog_checkpoint" and out[-1][0] in r[5] for r in cur.fetchall()):
                return out
            assert time.monotonic() < deadline, "the binlog checkpoint never reached the last file"
            time.sleep(0.1)


def _applied(meta, target: str, lsn: int) -> None:
    with meta.connect().cursor() as cur:
        cur.execute(
            "REPLACE INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, "
            "behind_seconds) VALUES ('a', %s, 0, %s, 0, 0)",
            (target, lsn),
        )


def test_only_files_every_consumer_confirmed_past_are_purged(zones, meta):
    reset_state(zones, meta)
    conn = zones["a"].connect()
    conn.autocommit(True)
    try:
        assert needed_file(meta, "a")[0] is None, "no checkpoint yet: nothing may go"
        positions = _rotate(conn, 4)  # files f1 .. f4
        store = CheckpointStore(meta, "a")
        try:  # the replicator's checkpoints in f2, f3 and f4, partition 0 at LSN 100, 200, 300
            for lsn, (f, pos) in zip((100, 200, 300), positions[1:], strict=True):
                store.save(Checkpoint("a", lsn, f, pos, {0: lsn}, lsn))
        finally:
            store.close()
        f1, f2, f3, f4 = (f for f, _ in positions)

        _applied(meta, "b", 300)  # b is done; c never reported: it may still need everything
        keep, why = needed_file(meta, "a")
        assert keep is None and "zone c" in why
        assert safe_purge(meta, "a", source_conn=conn) == (None, why)
        assert f1 in _files(conn)

        _applied(meta, "c", 250)  # c, the slow one, needs what follows LSN 200: the checkpoint in f3
        assert needed_file(meta, "a")[0] == f3
        assert safe_purge(meta, "a", dry_run=True, source_conn=conn)[0] == f3
        assert f1 in _files(conn), "a dry run purges nothing"

        refused, why = safe_purge(meta, "a", source_conn=conn, to_file=f4)
        assert refused is None and why.startswith("refused") and f3 in why
        assert f1 in _files(conn), "naming a file after a still-needed one is refused"

        assert safe_purge(meta, "a", source_conn=conn, to_file=f2)[0] == f2  # an earlier file: as asked
        assert f1 not in _files(conn) and f2 in _files(conn)

        purged, why = safe_purge(meta, "a", source_conn=conn)
        assert purged == f3 and "zone c partition 0" in why
        files = _files(conn)
        assert f2 not in files and {f3, f4} <= set(files), "the needed file and every later one survive"
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id >= 900000")
        conn.close()
        reset_state(zones, meta)
