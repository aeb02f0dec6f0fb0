"""The C module (zonesync/_native.c) queues the very bytes the Python path queues.

Rows events of a real binlog are read by the lean stream, which keeps the events of
tables the C module covers as their bytes (NativeRows). Each is then queued twice
by publish.queue_txn_events: as read (the C module builds the event documents) and
with its images decoded by the Python reader (the Python loop builds ChangeEvents,
msgspec encodes them). The messages must be equal byte for byte, and so must the
partition chains and the high-water mark, with and without a resend's is_retry
range and partition filter.
"""

from __future__ import annotations

import pytest
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from tests.support.binlog import open_stream, position
from zonesync.capture import native_rows
from zonesync.capture.binlog_stream import LeanBinLogStreamReader
from zonesync.capture.publish import Txn, close_txn, queue_txn_events
from zonesync.events import DELETE, INSERT, UPDATE, decode_message, encode_messages

pytestmark = pytest.mark.integration

DDL = (
    "CREATE TABLE zonesync_app.native_ints (id BIGINT PRIMARY KEY, t TINYINT, tu TINYINT UNSIGNED, s SMALLINT, "
    "su SMALLINT UNSIGNED, m MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED, "
    "c CHAR(3), vc VARCHAR(200), vlong VARCHAR(400), tx TEXT, mt MEDIUMTEXT, "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 1)",
    # an unsigned key past a signed BIGINT, no bookkeeping columns (origin: the zone's id, version 0)
    "CREATE TABLE zonesync_app.native_ukey (id BIGINT UNSIGNED PRIMARY KEY, v VARCHAR(10))",
    # a two-column key: read as bytes, queued by the Python loop
    "CREATE TABLE zonesync_app.native_pair (a INT, b INT, v VARCHAR(10), PRIMARY KEY (a, b))",
    # a column the C module does not read: the Python reader's, at read time already
    "CREATE TABLE zonesync_app.native_float (id INT PRIMARY KEY, f DOUBLE)",
)
TEXTS = [
    "".join(chr(c) for c in range(1, 128)),  # every ASCII character, controls and DEL included
    'quote " backslash \\ slash / tab \t',
    "zoné ✓ 区 😀",
    "",
    None,
]


def _write(conn) -> None:
    with conn.cursor() as cur:
        rows = []
        for n in range(1, 1201):  # one statement: rows events of many rows, queues past a message
            text = TEXTS[n % len(TEXTS)]
            rows.append(
                (n, -128 + n % 256, n % 256, -n, n % 65536, -n * 7, n * 7, -(n**3), n**3, -(n**5), 2**64 - n,
                 "abc" if n % 3 else None, text, (text or "x") * 3, text, None if n % 4 else "m" * 70000,
                 n % 3, n * 10)
            )  # fmt: skip
        cur.executemany("INSERT INTO zonesync_app.native_ints VALUES (" + ", ".join(["%s"] * 18) + ")", rows)
        conn.commit()
        cur.execute(
            "UPDATE zonesync_app.native_ints SET vc = CONCAT('u', id), _zs_version = _zs_version + 1 WHERE id < 700"
        )
        cur.execute("DELETE FROM zonesync_app.native_ints WHERE id > 1100")
        cur.execute("INSERT INTO zonesync_app.native_ukey VALUES (18446744073709551615, 'top'), (1, NULL), (0, 'z')")
        cur.execute("INSERT INTO zonesync_app.native_pair VALUES (1, 2, 'p'), (3, 4, NULL)")
        cur.execute("INSERT INTO zonesync_app.native_float VALUES (1, 0.5)")
        conn.commit()


def _txns(inst, start) -> list[Txn]:
    """One Txn per source transaction, its rows events as the lean stream read them."""
    stream = open_stream(
        inst, start, 4391, [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent], LeanBinLogStreamReader
    )
    txns, txn = [], None
    pks = {"native_ints": ["id"], "native_ukey": ["id"], "native_pair": ["a", "b"], "native_float": ["id"]}
    try:
        for ev in stream:
            if isinstance(ev, XidEvent):
                if txn is not None:
                    txns.append(txn)
                txn = None
                continue
            txn = txn or Txn(f"0-1-{len(txns)}", False)
            op = INSERT if isinstance(ev, WriteRowsEvent) else UPDATE if isinstance(ev, UpdateRowsEvent) else DELETE
            images = stream.rows.images(ev)
            txn.events.append((ev.table, pks[ev.table], op, images, ev.packet.log_pos, getattr(ev, "plain", False)))
            txn.rows += len(images)
    finally:
        stream.close()
    return txns


def _queue(txns, python: bool, hwm: int, retry_partitions) -> tuple[list[bytes], dict, int, dict]:
    """Every message the replicator would produce for these transactions, in order."""
    partition_lsns: dict[int, int] = {}
    counts: dict[int, int] = {}
    pending: dict[int, list] = {}
    out: list[bytes] = []

    def full(partition, events):  # as the replicator's: the last event waits for close_txn
        out.extend(encode_messages(events[:-1]))
        pending[partition] = events[-1:]

    for n, txn in enumerate(txns):
        if python:  # the same rows, decoded by the Python reader: the Python loop
            txn = Txn(txn.txn_id, False, [(t, k, o, list(i), e, p) for t, k, o, i, e, p in txn.events], txn.rows)
        hwm = queue_txn_events(
            txn,
            "binlog.000007",
            1_763_000_000 + n,
            ("a", 3, 4),
            partition_lsns,
            hwm,
            retry_partitions,
            pending,
            full,
            partition_counts=counts,
        )
        close_txn(pending)
    for partition in sorted(pending):
        out.extend(encode_messages(pending[partition]))
    return out, partition_lsns, hwm, counts


def test_the_c_module_queues_what_the_python_path_queues(zones):
    if native_rows._native is None:
        pytest.fail("zonesync._native is not built: run `make setup` (scripts/build_native.py)")
    conn = zones["a"].connect()
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS zonesync_app.native_ints, zonesync_app.native_ukey, "
                    "zonesync_app.native_pair, zonesync_app.native_float")  # fmt: skip
        for ddl in DDL:
            cur.execute(ddl)
    conn.autocommit(False)
    start = position(conn)
    _write(conn)
    conn.close()
    txns = _txns(zones["a"], start)

    kinds = {(t, type(i).__name__) for txn in txns for t, _, _, i, _, _ in txn.events}
    assert kinds == {
        ("native_ints", "NativeRows"),
        ("native_ukey", "NativeRows"),
        ("native_pair", "NativeRows"),
        ("native_float", "list"),
    }
    assert sum(txn.rows for txn in txns) == 1200 + 699 + 100 + 3 + 2 + 1

    lsns = sorted(e.lsn for m in _queue(txns, True, 0, None)[0] for e in decode_message(m))
    mid = lsns[len(lsns) // 2]  # a resend's range: the first half is is_retry
    for hwm, retry_partitions in ((0, None), (mid, None), (mid, {0, 2})):
        native, python = _queue(txns, False, hwm, retry_partitions), _queue(txns, True, hwm, retry_partitions)
        assert native[1:] == python[1:], "partition chains, high-water mark and published counts"
        assert sum(native[3].values()) == sum(txn.rows for txn in txns), "every row counted once"
        assert len(native[0]) == len(python[0]) > 4
        for mine, theirs in zip(native[0], python[0], strict=True):
            assert mine == theirs
        events = [e for m in native[0] for e in decode_message(m)]
        assert any(e.is_retry for e in events) == (hwm > 0)
        last = {}  # (transaction, partition) -> its last event there: the one with txn_end
        for e in events:
            last[(e.txn_id, e.partition)] = e
        assert [e for e in events if e.txn_end] == sorted(last.values(), key=events.index)
        if retry_partitions:
            assert {e.partition for e in events if e.is_retry} <= retry_partitions
    top = [e for m in native[0] for e in decode_message(m) if e.table == "native_ukey"]
    assert {e.pk["id"] for e in top} == {2**64 - 1, 1, 0} and {e.origin_zone for e in top} == {3}
