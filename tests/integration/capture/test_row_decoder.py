"""The compiled row reader returns what pymysqlreplication returns, value for value.

Every rows event of a real binlog is decoded twice, by the compiled reader
(capture/rows.py) and then by the library from the same packet, and the two
must be equal, types included.
"""

from __future__ import annotations

import decimal

import pytest
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from tests.support.binlog import open_stream, position
from zonesync.capture.rows import RowDecoder, binary_columns, binary_empty

pytestmark = pytest.mark.integration

TYPES_DDL = """
CREATE TABLE zonesync_app.rowcodec_types (
  id BIGINT PRIMARY KEY,
  t TINYINT, tu TINYINT UNSIGNED, s SMALLINT, su SMALLINT UNSIGNED,
  m MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED,
  f FLOAT, d DOUBLE,
  d1 DECIMAL(10,2), d2 DECIMAL(30,10), d3 DECIMAL(5,0), d4 DECIMAL(19,9),
  c CHAR(3), vc VARCHAR(20), vlong VARCHAR(400), vlatin VARCHAR(10) CHARACTER SET latin1,
  vb VARBINARY(16), tx TEXT, bl BLOB, mt MEDIUMTEXT,
  dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), dt1 DATETIME(1),
  ts TIMESTAMP NULL, ts2 TIMESTAMP(2) NULL, ts6 TIMESTAMP(6) NULL,
  da DATE,
  _zs_origin SMALLINT NOT NULL DEFAULT 1, _zs_version BIGINT NOT NULL DEFAULT 1
)"""

ROWS = [
    # every column NULL but the key
    "(1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, 1)",
    # lows
    "(2, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, -1.5, -2.25e-300, "
    "-12345678.99, -12345678901234567890.0123456789, -99999, -1234567890.123456789, "
    "'', '', '', '', '', '', '', '', "
    "'1000-01-01 00:00:00', '1000-01-01 00:00:00.001', '1000-01-01 00:00:00.000001', '1000-01-01 00:00:00.1', "
    "'1970-01-01 00:00:01', '1970-01-01 00:00:01.01', '1970-01-01 00:00:01.000001', '1000-01-01', 2, 5)",
    # highs, multibyte text, binary bytes
    "(3, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, "
    "18446744073709551615, 3.25, 1.7976931348623157e308, 99999999.99, 99999999999999999999.9999999999, 99999, "
    "9999999999.999999999, 'abc', 'zoné ✓ 区', REPEAT('x', 400), 'café', X'00FF10', REPEAT('长', 300), "
    "X'DEADBEEF00', REPEAT('m', 70000), "
    "'9999-12-31 23:59:59', '9999-12-31 23:59:59.999', '9999-12-31 23:59:59.999999', '2026-11-22 12:34:56.7', "
    "'2038-01-19 03:14:07', '2026-11-22 12:34:56.78', '2026-11-22 12:34:56.123456', '9999-12-31', 3, 9)",
    # small and mixed values, some NULLs in between
    "(4, 0, 1, -1, 1, -1, 1, -1, 1, -1, 1, 0, 0, 0.01, -0.0000000001, 0, -0.000000001, 'a', NULL, 'y', NULL, "
    "X'', NULL, '', 'm', '2026-11-22 00:00:00', NULL, '2026-11-22 00:00:00.5', NULL, "
    "'2026-11-22 00:00:00', NULL, '2026-11-22 00:00:00.000500', '2026-02-28', 1, 2)",
]


def _both(inst, start, server_id):
    """(compiled, library) images of every rows event from the position on, and the decoder."""
    decoder = RowDecoder()
    stream = open_stream(inst, start, server_id, [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
    compiled, library = [], []
    try:
        for ev in stream:
            fallbacks = decoder.fallbacks
            compiled.append((type(ev).__name__, decoder.images(ev)))
            if decoder.fallbacks == fallbacks:  # the compiled reader read it: now the library, same packet
                library.append((type(ev).__name__, _library(ev)))
            else:
                library.append(compiled[-1])
    finally:
        stream.close()
    return compiled, library, decoder


def _library(ev):
    """The library's rows, but for its one quirk: an empty binary value is '' there, b'' in
    an image (as the target reads it back; RowDecoder's own fallback does the same)."""
    binary = binary_columns(ev.columns)
    if isinstance(ev, WriteRowsEvent):
        return [(None, binary_empty(r["values"], binary)) for r in ev.rows]
    if isinstance(ev, UpdateRowsEvent):
        return [(binary_empty(r["before_values"], binary), binary_empty(r["after_values"], binary)) for r in ev.rows]
    return [(binary_empty(r["values"], binary), None) for r in ev.rows]


def _typed(images):
    """Values with their types: 1 == 1.0 == Decimal(1) must not pass."""
    return [
        [None if image is None else {k: (type(v).__name__, v) for k, v in image.items()} for image in pair]
        for pair in images
    ]


def _types_table(inst):
    """A connection (autocommit, UTC) to a zone with rowcodec_types made afresh."""
    conn = inst.connect("zonesync_app")
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("DROP TABLE IF EXISTS zonesync_app.rowcodec_types")
        cur.execute(TYPES_DDL)
    return conn


def test_compiled_reader_matches_the_library_for_every_column_type(zones):
    inst = zones["a"]
    conn = _types_table(inst)
    with conn.cursor() as cur:
        start = position(conn)
        cur.execute("INSERT INTO rowcodec_types VALUES " + ", ".join(ROWS))
        cur.execute("UPDATE rowcodec_types SET vc = CONCAT(IFNULL(vc, ''), '!'), d1 = -d1, _zs_version = 10")
        cur.execute("UPDATE rowcodec_types SET t = NULL, dt6 = NULL WHERE id = 3")
        cur.execute("DELETE FROM rowcodec_types WHERE id IN (2, 4)")
        for n in range(5, 205):  # one event with many rows, and single-row ones
            cur.execute(
                "INSERT INTO rowcodec_types (id, i, vc, d1, dt3) VALUES (%s, %s, %s, %s, '2026-01-01 00:00:00.123')",
                (n, -n, f"row {n}", decimal.Decimal(n) / 100),
            )
    compiled, library, decoder = _both(inst, start, server_id=4301)
    conn.close()
    assert decoder.fallbacks == 0, "every column type of this table is one the compiled reader covers"
    # (a statement's rows span several events once they pass binlog_row_event_max_size)
    kinds = [k for n, (k, _) in enumerate(compiled) if n == 0 or compiled[n - 1][0] != k]
    assert kinds == ["WriteRowsEvent", "UpdateRowsEvent", "DeleteRowsEvent", "WriteRowsEvent"]
    assert len(compiled) > 204
    assert sum(len(images) for _, images in compiled) == 4 + 4 + 1 + 2 + 200
    for (kind_a, a), (kind_b, b) in zip(compiled, library, strict=True):
        assert kind_a == kind_b
        for pa, pb in zip(_typed(a), _typed(b), strict=True):
            for ia, ib in zip(pa, pb, strict=True):
                if ia != ib:
                    assert {k: v for k, v in ia.items() if ib.get(k) != v} == {
                        k: v for k, v in ib.items() if ia.get(k) != v
                    }
    # spot checks that the comparison is not vacuous
    inserted = {after["id"]: after for kind, images in compiled if kind == "WriteRowsEvent" for _, after in images}
    assert inserted[1]["t"] is None and inserted[3]["bu"] == 18446744073709551615
    assert inserted[3]["vc"] == "zoné ✓ 区" and inserted[3]["vb"] == b"\x00\xff\x10"
    empty = [after for after in inserted.values() if after["vb"] is not None and len(after["vb"]) == 0]
    assert empty and all(after["vb"] == b"" and after["bl"] == b"" for after in empty), "empty binary is b''"
    assert inserted[2]["d2"] == decimal.Decimal("-12345678901234567890.0123456789")
    assert len(inserted[3]["mt"]) == 70000


def test_unsupported_column_types_fall_back_to_the_library(zones):
    inst = zones["a"]
    conn = inst.connect("zonesync_app")
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS zonesync_app.rowcodec_other")
        cur.execute(
            "CREATE TABLE zonesync_app.rowcodec_other (id INT PRIMARY KEY, e ENUM('x','y'), tm TIME(3), yr YEAR, "
            "bt BIT(5))"
        )
        start = position(conn)
        cur.execute(
            "INSERT INTO rowcodec_other VALUES (1, 'y', '-12:34:56.789', 2026, b'10101'), (2, NULL, NULL, NULL, NULL)"
        )
        cur.execute("UPDATE rowcodec_other SET e = 'x'")
    compiled, _, decoder = _both(inst, start, server_id=4302)
    conn.close()
    assert decoder.fallbacks == 2
    assert compiled[0][1][0][1]["e"] == "y"
    assert compiled[1][1][0] == (
        {"id": 1, "e": "y", "tm": compiled[1][1][0][0]["tm"], "yr": 2026, "bt": "10101"},
        {"id": 1, "e": "x", "tm": compiled[1][1][0][0]["tm"], "yr": 2026, "bt": "10101"},
    )


def test_plain_tables_are_those_whose_images_need_no_tagging(zones):
    """The replicator skips encode_row for a table map the decoder calls plain: only ever
    for images encode_row would give back untouched (ints, floats, text, NULL)."""
    from zonesync.events import encode_row

    inst = zones["a"]
    conn = _types_table(inst)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS zonesync_app.rowcodec_plain")
        cur.execute(
            "CREATE TABLE zonesync_app.rowcodec_plain (id BIGINT PRIMARY KEY, m MEDIUMINT, f DOUBLE, "
            "c CHAR(2), v VARCHAR(300), t TEXT, l VARCHAR(5) CHARACTER SET latin1, u INT UNSIGNED)"
        )
        start = position(conn)
        cur.execute("INSERT INTO rowcodec_types VALUES " + ", ".join(ROWS))
        cur.execute(
            "INSERT INTO rowcodec_plain VALUES (1, -5, 1.5, 'ab', 'zoné', REPEAT('t', 300), 'café', 7), "
            "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
        )
    decoder = RowDecoder()
    stream = open_stream(inst, start, 4303, [WriteRowsEvent])
    seen = {}
    try:
        for ev in stream:
            table = ev.table_map[ev.table_id]
            images = decoder.images(ev)
            seen[ev.table] = decoder.plain(table)
            for _, after in images:
                untouched = encode_row(after) is after
                assert untouched or not seen[ev.table], f"{ev.table}: a plain image was tagged: {after}"
    finally:
        stream.close()
        conn.close()
    assert seen == {"rowcodec_types": False, "rowcodec_plain": True}
