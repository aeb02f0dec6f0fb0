"""The applier's literals are pymysql's, and read back as the values they came from."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from zonesync.apply.batch.literals import literal_function

pytestmark = pytest.mark.integration

VALUES = [
    0,
    -9223372036854775808,
    18446744073709551615,
    "",
    "plain",
    'it\'s \\ a "quote"\n\r\x1a\x00 ✓ 区',
    "%s %(x)s",  # statements are sent without %-formatting
    None,
    True,
    1.5,
    decimal.Decimal("-12.50"),
    dt.datetime(2026, 11, 22, 12, 0, 0, 123456),
    dt.date(2026, 11, 22),
    b"\x00\xff'\\",
]


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_literals_match_pymysql_and_round_trip(zones, sql_mode):
    conn = zones["a"].connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
            lit = literal_function(conn)
            assert [lit(v) for v in VALUES] == [conn.literal(v) for v in VALUES]
            cur.execute("SELECT " + ", ".join(lit(v) for v in VALUES[:8]))
            back = cur.fetchone()
    finally:
        conn.close()
    assert back == tuple(VALUES[:8])


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_row_tuples_are_the_rows_literals_in_order(zones, sql_mode):
    from zonesync.apply.batch.literals import row_tuples

    conn = zones["a"].connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
            lit = literal_function(conn)
            rows = [{f"c{i}": v for i, v in enumerate(VALUES[n:] + VALUES[:n])} for n in range(len(VALUES))]
            expected = ", ".join("(" + ", ".join(lit(v) for v in row.values()) + ")" for row in rows)
            assert row_tuples(rows, lit) == expected
            assert row_tuples(rows[:1], lit).startswith("(0, -9223372036854775808, 18446744073709551615, '', ")
            cur.execute("SELECT * FROM (VALUES " + row_tuples([dict(enumerate(VALUES[:8]))], lit) + ") AS t")
            assert cur.fetchone() == tuple(VALUES[:8])
    finally:
        conn.close()
    assert row_tuples([], lit) == ""


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_rows_of_integers_text_and_nulls_render_as_their_literals(zones, sql_mode):
    """The C renderer's rows (apply/literals.py) are the rows' literals, and read back."""
    from zonesync import _native
    from zonesync.apply.batch.literals import row_tuples

    every_char = "".join(chr(c) for c in range(128)) + "é ✓ 区 😀"
    rows = [
        {"a": n, "b": every_char[n:] + every_char[:n], "c": None if n % 2 else -(2**63) + n, "d": 2**64 + n}
        for n in range(0, 140, 7)
    ]
    conn = zones["a"].connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
            lit = literal_function(conn)
            expected = ", ".join("(" + ", ".join(conn.literal(v) for v in row.values()) + ")" for row in rows)
            assert row_tuples(rows, lit) == expected
            assert (_native.render_rows(rows, 4) == expected) == (sql_mode == ""), "the C renderer is used"
            cur.execute("SELECT * FROM (VALUES " + row_tuples(rows, lit) + ") AS t")
            back = [[int(v) if isinstance(v, decimal.Decimal) else v for v in r] for r in cur.fetchall()]
            assert back == [list(row.values()) for row in rows]
    finally:
        conn.close()
    assert _native.render_rows([{"a": 1.5}], 1) is None and _native.render_rows([{"a": 1}], 2) is None
