"""The ground is real: a write to zone a comes back as a row event from its binlog."""

from __future__ import annotations

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

pytestmark = pytest.mark.integration


def _position(conn) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return file, int(pos)


def test_zone_settings_are_the_ones_capture_needs(zones):
    conn = zones["a"].connect()
    with conn.cursor() as cur:
        cur.execute(
            "SELECT @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@log_bin_compress, "
            "@@local_infile, @@server_id, @@gtid_domain_id"
        )
        row = cur.fetchone()
    assert row == ("ROW", "FULL", "FULL", 0, 1, 1, 1)
    ids = set()
    for name in ("a", "b", "c", "meta"):
        with zones[name].connect().cursor() as cur:
            cur.execute("SELECT @@server_id")
            ids.add(cur.fetchone()[0])
    assert len(ids) == 4, "every instance needs its own server_id"


def test_zones_leave_purging_to_safe_purge(zones):
    """S001-08: the server's own expiry would remove binlog files a replicator still needs
    (it cannot know about consumers); zones run with it off and purge only through
    `zonesync binlog safe-purge`."""
    for name in ("a", "b", "c"):
        with zones[name].connect().cursor() as cur:
            cur.execute("SELECT @@expire_logs_days, @@binlog_expire_logs_seconds")
            days, seconds = cur.fetchone()
        assert float(days) == 0 and int(seconds) == 0, f"zone {name} expires its binlog by itself"


def test_zones_generate_keys_no_other_zone_generates(zones):
    """S002-14: AUTO_INCREMENT values of one zone never collide with another's (each zone
    steps by 16 from its own zone id), so rows created in two zones by the application's
    own key generation replicate without meeting each other."""
    made = {}
    for name in ("a", "b", "c"):
        conn = zones[name].connect("zonesync_app")
        with conn.cursor() as cur:
            cur.execute("CREATE TEMPORARY TABLE seq_probe (id BIGINT AUTO_INCREMENT PRIMARY KEY, n INT)")
            cur.executemany("INSERT INTO seq_probe (n) VALUES (%s)", [(n,) for n in range(20)])
            cur.execute("SELECT id FROM seq_probe")
            made[name] = {r[0] for r in cur.fetchall()}
        conn.close()
    assert all(len(ids) == 20 for ids in made.values())
    assert not (made["a"] & made["b"] or made["a"] & made["c"] or made["b"] & made["c"])


def test_write_to_zone_a_is_read_back_from_its_binlog(zones):
    inst = zones["a"]
    conn = inst.connect("zonesync_app")
    log_file, log_pos = _position(conn)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (9001, 'acme', 1, 7)")
        cur.execute("UPDATE tenants SET name = 'acme2' WHERE tenant_id = 9001")
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": inst.port, "user": "root", "passwd": ""},
        server_id=4242,
        only_events=[WriteRowsEvent, UpdateRowsEvent],
        log_file=log_file,
        log_pos=log_pos,
        resume_stream=True,
        blocking=False,
    )
    try:
        events = [(type(e).__name__, e.table, e.rows) for e in stream]
    finally:
        stream.close()
    assert [(kind, table) for kind, table, _ in events] == [
        ("WriteRowsEvent", "tenants"),
        ("UpdateRowsEvent", "tenants"),
    ]
    inserted = events[0][2][0]["values"]
    assert inserted["tenant_id"] == 9001 and inserted["name"] == "acme" and inserted["_zs_version"] == 7
    update = events[1][2][0]
    assert update["before_values"]["name"] == "acme"  # FULL row image: the old row is there
    assert update["after_values"]["name"] == "acme2"
