"""A unique value that moves from a deleted row to a new one (S003-21): the delete goes
first, so the target never meets the value twice, and its binlog says what happened
(a delete and an insert, not an update that turns one row into the other)."""

from __future__ import annotations

import pytest
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from tests.support.binlog import open_stream, position
from tests.support.events import change_event
from zonesync.apply.writer import ZoneWriter
from zonesync.capture.event import DELETE, INSERT

pytestmark = pytest.mark.integration

DDL = (
    "CREATE TABLE zonesync_app.uniq_rows (id BIGINT PRIMARY KEY, u INT NOT NULL, v VARCHAR(20), "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0, UNIQUE KEY (u))"
)


def image(id_: int, u: int, v: str, version: int) -> dict:
    return {"id": id_, "u": u, "v": v, "_zs_origin": 1, "_zs_version": version}


def test_a_deleted_rows_unique_value_goes_to_a_new_row(zones):
    inst = zones["b"]
    conn = inst.connect()
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS zonesync_app.uniq_rows")
        cur.execute(DDL)
        cur.execute("DELETE FROM zonesync.tombstones WHERE table_name = 'uniq_rows'")
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute("INSERT INTO zonesync_app.uniq_rows VALUES (1, 5, 'x', 1, 1), (3, 6, 'z', 1, 1)")
    writer = ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app")
    try:
        start = position(conn)
        x = image(1, 5, "x", 1)
        batch = [
            change_event(lsn=10, op=DELETE, table="uniq_rows", pk={"id": 1}, version=2, old=x),
            change_event(lsn=20, prev_lsn=10, op=INSERT, table="uniq_rows", pk={"id": 2}, version=3,
                         new=image(2, 5, "y", 3)),
        ]  # fmt: skip
        result = writer.apply_many([("a", batch)], [])
        assert (result.applied, result.skipped) == (2, 0)
        with conn.cursor() as cur:
            cur.execute("SELECT id, u, v FROM zonesync_app.uniq_rows ORDER BY id")
            assert cur.fetchall() == ((2, 5, "y"), (3, 6, "z"))
            cur.execute("SELECT version FROM zonesync.tombstones WHERE table_name = 'uniq_rows' AND pk = '[1]'")
            assert cur.fetchone() == (2,)
        stream = open_stream(inst, start, 4481, [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
        try:
            kinds = [(type(ev).__name__, [r.get("values", r.get("after_values"))["id"] for r in ev.rows])
                     for ev in stream if ev.table == "uniq_rows"]  # fmt: skip
        finally:
            stream.close()
        assert kinds == [("DeleteRowsEvent", [1]), ("WriteRowsEvent", [2])], "a delete, then an insert"
    finally:
        writer.close()
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS zonesync_app.uniq_rows")
        conn.close()
