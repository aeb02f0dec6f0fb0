"""The lean stream yields what pymysqlreplication yields, event for event.

One stretch of a real binlog (single-row and multi-row transactions, updates,
deletes, a table with column types the compiled reader leaves to the library,
another schema, DDL, an applier's skip_replication transaction, a binlog
rotation) is read by the library's reader and by the lean one, and every
event must agree: its kind, position, flags, GTID, XID, table and rows.
"""

from __future__ import annotations

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from tests.support.binlog import open_stream, position
from zonesync.capture.binlog_stream import LeanBinLogStreamReader
from zonesync.capture.rows import RowDecoder

pytestmark = pytest.mark.integration

ONLY = [
    GtidEvent,
    MariadbGtidEvent,
    XidEvent,
    QueryEvent,
    RotateEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
]


def _read(reader_class, inst, start, server_id):
    decoder = RowDecoder()
    stream = open_stream(inst, start, server_id, ONLY, reader_class)
    out = []
    try:
        for ev in stream:
            # the library class an event is (a lean event is a subclass of it)
            kind = next(c for c in type(ev).__mro__ if c.__module__.startswith("pymysqlreplication"))
            row = [kind.__name__]
            row += [stream.log_file, stream.log_pos, ev.packet.log_pos, ev.packet.flags, ev.timestamp]
            if isinstance(ev, MariadbGtidEvent):
                row.append(ev.gtid)
            elif isinstance(ev, XidEvent):
                row.append(ev.xid)
            elif isinstance(ev, QueryEvent):
                row.append(ev.query)
            elif isinstance(ev, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                # (none_sources left out: the lean stream cannot tell a zero date from NULL)
                images = decoder.images(ev)
                rows = [{k: v for k, v in r.items() if "none_sources" not in k} for r in ev.rows]
                row += [ev.schema, ev.table, images, rows]
            out.append(row)
        lean = getattr(stream, "lean_events", 0)
    finally:
        stream.close()
    return out, lean


def test_lean_stream_matches_the_library_event_for_event(zones):
    inst = zones["a"]
    conn = inst.connect()
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS zonesync_other")
        cur.execute("DROP TABLE IF EXISTS zonesync_app.lean_rows, zonesync_app.lean_enum, zonesync_other.elsewhere")
        cur.execute("CREATE TABLE zonesync_app.lean_rows (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)")
        cur.execute("CREATE TABLE zonesync_app.lean_enum (id INT PRIMARY KEY, e ENUM('x','y'))")
        cur.execute("CREATE TABLE zonesync_other.elsewhere (id INT PRIMARY KEY)")
        start = position(conn)
        for n in range(1, 30):
            cur.execute("INSERT INTO zonesync_app.lean_rows VALUES (%s, %s, %s)", (n, f"v{n}", n * n))
        cur.execute(
            "INSERT INTO zonesync_app.lean_rows VALUES " + ", ".join(f"({n}, NULL, -{n})" for n in range(30, 90))
        )
        cur.execute("UPDATE zonesync_app.lean_rows SET v = 'up' WHERE id < 40")
        cur.execute("DELETE FROM zonesync_app.lean_rows WHERE id > 80")
        cur.execute("INSERT INTO zonesync_app.lean_enum VALUES (1, 'y'), (2, NULL)")
        cur.execute("INSERT INTO zonesync_other.elsewhere VALUES (1), (2)")
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute("INSERT INTO zonesync_app.lean_rows VALUES (500, 'applier', 0)")
        cur.execute("SET SESSION skip_replication = 0")
        cur.execute("ALTER TABLE zonesync_app.lean_rows ADD COLUMN extra INT")
        cur.execute("INSERT INTO zonesync_app.lean_rows VALUES (501, 'after ddl', 1, 7)")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("INSERT INTO zonesync_app.lean_rows VALUES (502, 'new file', 2, 8)")
        cur.execute("UPDATE zonesync_app.lean_enum SET e = 'x'")
    conn.close()
    library, _ = _read(BinLogStreamReader, inst, start, 4311)
    lean, lean_count = _read(LeanBinLogStreamReader, inst, start, 4312)
    assert len(lean) == len(library) > 100
    for mine, theirs in zip(lean, library, strict=True):
        assert mine == theirs
    assert lean_count > 80, "the hot events went the lean way"
    flagged = [e for e in lean if e[0] == "MariadbGtidEvent" and e[4] & 0x8000]
    assert len(flagged) == 1, "the applier's transaction keeps its skip_replication flag"
    tables = {e[7] for e in lean if e[0].endswith("RowsEvent")}
    assert tables == {"lean_rows", "lean_enum"}, "another schema's rows are filtered out"


def test_a_stream_never_reads_a_server_other_than_the_one_its_pass_began_on(zones):
    """The library reconnects at the same position on a lost connection; with the server
    the pass expects named (the capture segment's), a connection to any other server
    (a virtual IP moved to a promoted replica) ends the read instead (docs/failover.md)."""
    from zonesync.capture.binlog_stream import ServerChanged, open_reader
    from zonesync.capture.source import SourceDB

    inst = zones["a"]
    source = SourceDB("127.0.0.1", inst.port, "root", "", ["zonesync_app"])
    conn = inst.connect()
    try:
        start = position(conn)
    finally:
        conn.close()
    right = open_reader(RowDecoder(), source, 4990, "zs:test", *start, expected_server_id=source.server_id())
    try:
        assert right.fetchone() is not None  # (a rotate or heartbeat: it reads)
    finally:
        right.close()
    wrong = open_reader(RowDecoder(), source, 4991, "zs:test", *start, expected_server_id=source.server_id() + 100)
    try:
        with pytest.raises(ServerChanged, match=f"is now server_id {source.server_id()}, not"):
            wrong.fetchone()
    finally:
        wrong.close()
