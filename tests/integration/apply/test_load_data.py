"""New rows as LOAD DATA LOCAL (apply/load_data.py) mean what the INSERT they replace means.

LOAD DATA LOCAL skips duplicate keys and truncates values that do not fit, with
warnings; the writer must turn both into the INSERT's outcome (the read-first path,
strict), write exactly the rows' values, keep the applier's skip_replication flag on
them, go back to INSERTs on a server that refuses LOCAL, and never send the server
anything but the rows it was given.
"""

from __future__ import annotations

import pymysql
import pytest
from pymysql.constants import CLIENT
from pymysqlreplication.event import MariadbGtidEvent
from pymysqlreplication.row_event import WriteRowsEvent

from tests.support.binlog import open_stream, position
from tests.support.events import change_event
from zonesync.apply.batch import load_data
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.errors import SchemaMismatch
from zonesync.events import INSERT

pytestmark = pytest.mark.integration

TABLE = "load_rows"
DDL = (
    f"CREATE TABLE zonesync_app.{TABLE} (id BIGINT PRIMARY KEY, v VARCHAR(300), n BIGINT, short VARCHAR(3), "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)"
)
TEXT = "".join(chr(c) for c in range(128)) + "\\N é ✓ 区 😀"  # every ASCII character, a literal \N


def row(i: int, version: int = 5, short: str | None = "ok", n: int | None = None) -> dict:
    return {
        "id": i,
        "v": TEXT[i % 40 :] + TEXT[: i % 40],
        "n": -(2**63) + i if n is None else n,
        "short": short,
        "_zs_origin": 1,
        "_zs_version": version,
    }


def inserts(rows: list[dict]):
    return [
        change_event(lsn=1000 + 10 * n, op=INSERT, table=TABLE, pk={"id": r["id"]}, version=r["_zs_version"], new=r)
        for n, r in enumerate(rows)
    ]


@pytest.fixture
def target(zones):
    inst = zones["b"]
    conn = inst.connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS zonesync_app.{TABLE}")
        cur.execute(DDL)
        cur.execute("DELETE FROM zonesync.tombstones WHERE table_name = %s", (TABLE,))
        cur.execute("DELETE FROM zonesync.row_locks WHERE table_name = %s", (TABLE,))
        cur.execute("DELETE FROM zonesync.apply_state")  # the batch's chain starts after LSN 0
    writer = ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app")
    try:
        yield inst, conn, writer
    finally:
        writer.close()
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 1")
            cur.execute(f"DROP TABLE IF EXISTS zonesync_app.{TABLE}")
            cur.execute("DELETE FROM zonesync.row_locks WHERE table_name = %s", (TABLE,))
            cur.execute("DELETE FROM zonesync.apply_state")
        conn.close()


def stored(conn) -> dict[int, dict]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM zonesync_app.{TABLE}")
        return {r["id"]: r for r in cur.fetchall()}


def loads(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Com_load'")
        return int(cur.fetchone()[1])


def test_new_rows_load_exactly_their_values_and_keep_the_skip_flag(target):
    inst, conn, writer = target
    rows = [row(i, short=None if i % 3 else "abc", n=None if i % 2 else 7) for i in range(1, 301)]
    start, before = position(conn), loads(conn)
    result = writer.apply_many([("a", inserts(rows))], [("a", 0, 4000, 9, 0)])
    assert (result.applied, result.new_rows) == (300, 300)
    assert loads(conn) == before + 1, "one LOAD DATA, no INSERT"
    assert stored(conn) == {r["id"]: r for r in rows}
    stream = open_stream(inst, start, 4471, [MariadbGtidEvent, WriteRowsEvent])
    try:
        flags = [ev.packet.flags & 0x8000 for ev in stream if isinstance(ev, MariadbGtidEvent)]
    finally:
        stream.close()
    assert flags and all(flags), "the loaded rows are the applier's: flagged, never published again"


def test_an_existing_key_is_decided_by_version_not_skipped(target):
    """LOCAL would skip an existing key with a warning; the writer decides it row by row, as
    the INSERT's fallback does: by version, and never over another row (S004-36)."""
    _, conn, writer = target
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO zonesync_app.{TABLE} (id, v, _zs_origin, _zs_version) VALUES (2, 'other', 2, 1)")
        cur.execute(f"INSERT INTO zonesync_app.{TABLE} (id, v, _zs_origin, _zs_version) VALUES (3, 'newer', 1, 9)")
        cur.execute(f"INSERT INTO zonesync_app.{TABLE} (id, v, _zs_origin, _zs_version) VALUES (5, 'same', 1, 5)")
    rows = [row(1), row(2), row(3), row(4), row(5)]
    result = writer.apply_many([("a", inserts(rows))], [])
    assert (result.applied, result.skipped, result.new_rows) == (2, 3, 0), "rolled back, decided row by row"
    assert [(t, pk) for _, t, pk, _ in result.locked] == [(TABLE, "[2]")]
    got = stored(conn)
    assert got[2]["v"] == "other", "an older row of another entity is locked, never overwritten"
    assert got[3]["v"] == "newer", "a newer row stays"
    assert got[5]["v"] == "same", "the same row (origin and version): a replay, skipped"
    assert got[1] == rows[0] and got[4] == rows[3]


def test_a_value_that_does_not_fit_is_never_truncated(target):
    _, conn, writer = target
    # the strict read-first path refuses it, as the INSERT did: the table's definition disagrees (table_holds.py)
    with pytest.raises(SchemaMismatch, match="a value of column short from zone a does not fit load_rows"):
        writer.apply_many([("a", inserts([row(1), row(2, short="toolong")]))], [])
    assert stored(conn) == {}, "nothing loaded with a warning stays"


def test_a_server_without_local_infile_gets_inserts(target):
    _, conn, writer = target
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = 0")
    rows = [row(i) for i in range(1, 11)]
    before = loads(conn)
    result = writer.apply_many([("a", inserts(rows))], [])
    assert (result.applied, result.new_rows) == (10, 10)
    assert stored(conn) == {r["id"]: r for r in rows}
    assert writer._load is False and loads(conn) == before + 1, "refused once, then INSERTs"


def test_the_connection_sends_only_the_rows_it_was_given(target):
    inst, conn, _ = target
    probe = load_data.LoadConnection(
        host="127.0.0.1", port=inst.port, user="root", password="", database="zonesync_app", local_infile=True,
        client_flag=CLIENT.MULTI_STATEMENTS,
    )  # fmt: skip
    try:
        with probe.cursor() as cur:
            probe.payload = b"1\tx\t\\N\t\\N\t1\t1\n"
            with pytest.raises(load_data.LoadRefused):  # the server asks for another name
                cur.execute(f"LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE {TABLE} (id, v, n, short)")
            assert probe.payload is None, "a payload serves one statement"
            with pytest.raises(load_data.LoadRefused):  # the right name, but no rows handed over
                cur.execute(load_data.statement(TABLE, "id, v, n, short, _zs_origin, _zs_version"))
        probe.commit()
    finally:
        probe.close()
    assert stored(conn) == {}
