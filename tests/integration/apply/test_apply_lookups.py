"""The writer's tombstone and lock lookups: skipped for a table that has neither,
and still seeing a tombstone that a local delete committed while the writer waited
for the row's lock."""

from __future__ import annotations

import threading
import time

import pymysql
import pytest

from tests.support.events import change_event
from tests.support.replication import reset_state
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.events import INSERT, UPDATE, ChangeEvent, encode_row

pytestmark = pytest.mark.integration

_lsn = iter(range(1000, 10**9, 10))


def event(op: str, tenant: int, version: int, old: dict | None = None, name: str = "from a") -> ChangeEvent:
    new = {"tenant_id": tenant, "name": name, "_zs_origin": 1, "_zs_version": version}
    return change_event(
        lsn=next(_lsn), op=op, table="tenants", pk={"tenant_id": tenant}, version=version, old=old, new=new
    )


@pytest.fixture
def zone_b(zones, meta):
    reset_state(zones, meta)
    writer = ZoneWriter("127.0.0.1", zones["b"].port, "root", "", "zonesync_app")
    conn = zones["b"].connect()
    conn.autocommit(True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
        yield writer, conn
    finally:
        writer.close()
        conn.close()
        reset_state(zones, meta)


def names(conn) -> dict[int, tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SELECT tenant_id, name, _zs_version FROM zonesync_app.tenants")
        return {t: (n, v) for t, n, v in cur.fetchall()}


def image(conn, tenant: int) -> dict:
    """A target row as an event's image of it."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM zonesync_app.tenants WHERE tenant_id = %s", (tenant,))
        return encode_row(cur.fetchone())


def test_a_table_without_tombstones_or_locks_takes_its_batch(zone_b):
    writer, conn = zone_b
    with conn.cursor() as cur:  # another table's tombstone and lock, under the same pk text
        cur.execute("INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES ('orders', '[1]', 99)")
        cur.execute(
            "INSERT INTO zonesync.row_locks (table_name, pk, reason, first_event) VALUES ('orders', '[2]', 'x', '{}')"
        )
    result = writer.apply_many([("a", [event(INSERT, 1, 3), event(INSERT, 2, 3)])], [])
    assert (result.applied, result.skipped) == (2, 0)
    assert names(conn) == {1: ("from a", 3), 2: ("from a", 3)}


def test_a_tombstone_stops_an_older_insert_and_a_lock_holds_an_update(zone_b):
    writer, conn = zone_b
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (4, 'old', 1, 1)"
        )
        cur.execute("INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES ('tenants', '[7]', 5)")
        cur.execute(
            "INSERT INTO zonesync.row_locks (table_name, pk, reason, first_event) VALUES ('tenants', '[4]', 'x', '{}')"
        )
    old4 = {"tenant_id": 4, "name": "old", "_zs_origin": 1, "_zs_version": 1}
    batch = [event(INSERT, 7, 5), event(INSERT, 8, 3), event(UPDATE, 4, 2, old=old4), event(INSERT, 9, 6)]
    result = writer.apply_many([("a", batch)], [])
    assert (result.applied, result.skipped) == (2, 2)
    rows = names(conn)
    assert 7 not in rows, "a tombstone at the insert's version must keep the row deleted"
    assert rows[4] == ("old", 1), "a locked row takes no change"
    assert rows[8] == ("from a", 3) and rows[9] == ("from a", 6)
    with conn.cursor() as cur:
        cur.execute("SELECT held_events FROM zonesync.row_locks WHERE table_name = 'tenants' AND pk = '[4]'")
        assert cur.fetchone()[0] == 1


def test_a_delete_committed_while_the_writer_waited_for_the_row_is_seen(zone_b, zones):
    """A local delete (dal/transaction.py) removes the row and writes its tombstone in
    one transaction. The writer's FOR UPDATE read waits for that transaction; the
    tombstone probe after it must see the tombstone, though the table had none when
    the writer's request started, or the older insert would bring the row back."""
    writer, conn = zone_b
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (11, 'b', 2, 1)"
        )
    local = zones["b"].connect()
    try:
        with local.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
            cur.execute("BEGIN")
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id = 11")
            cur.execute("INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES ('tenants', '[11]', 2)")
        out = {}
        t = threading.Thread(
            target=lambda: out.setdefault("r", writer.apply_many([("a", [event(INSERT, 11, 2)])], [])), daemon=True
        )
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), "the writer should be waiting for the row's lock"
        local.commit()
        t.join(10)
    finally:
        local.close()
    assert (out["r"].applied, out["r"].skipped) == (0, 1)
    assert 11 not in names(conn)


# -- new rows: a plain INSERT ahead of the reads, for a table without tombstones or locks --
def test_new_rows_skip_the_read_and_existing_keys_fall_back_to_deciding_row_by_row(zone_b):
    writer, conn = zone_b
    result = writer.apply_many([("a", [event(INSERT, 1, 3), event(INSERT, 2, 3)])], [])
    assert (result.applied, result.new_rows) == (2, 2), "new rows of a clean table are written without a read"
    with conn.cursor() as cur:  # a newer row 3 already in the target (a local write)
        cur.execute(
            "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (3, 'local', 2, 9)"
        )
    # Rows 3 and 1 exist: the INSERT fails on them, the transaction is applied again
    # read-first: the older insert of 3 is skipped, 4 lands, and so does the replay of 1's
    # insert with its update (the target has 1 at the insert's version: the rest is new).
    old1 = image(conn, 1)  # as a's binlog has it: every column
    newer = {**old1, "name": "newer", "_zs_version": 7}
    replay = [
        change_event(lsn=next(_lsn), op=INSERT, table="tenants", pk={"tenant_id": 1}, version=3, new=old1),
        change_event(lsn=next(_lsn), op=UPDATE, table="tenants", pk={"tenant_id": 1}, version=7, old=old1, new=newer),
    ]
    batch = [event(INSERT, 3, 5), event(INSERT, 4, 1), *replay]
    result = writer.apply_many([("a", batch)], [])
    assert (result.applied, result.skipped, result.new_rows) == (3, 1, 0)
    assert names(conn) == {1: ("newer", 7), 2: ("from a", 3), 3: ("local", 9), 4: ("from a", 1)}
    result = writer.apply_many([("a", [event(INSERT, 3, 10, name="newest"), event(INSERT, 5, 1)])], [])
    assert (result.applied, result.skipped) == (1, 1)
    assert names(conn)[3] == ("local", 9), "a newer insert of another row with the key is no update of it"
    assert [pk for _, _, pk, _ in result.locked] == ["[3]"], "it locks the row (S004-36)"


def test_a_tombstone_written_after_the_writer_last_looked_still_stops_a_new_row(zone_b):
    """The writer remembers that a table had no tombstones: only a hint. A delete in the
    target since then (dal/transaction.py writes its tombstone) must still keep an older
    insert of that row out: the question asked after the INSERT sees the tombstone, and
    the batch is applied again read-first."""
    writer, conn = zone_b
    assert writer.apply_many([("a", [event(INSERT, 1, 1)])], []).new_rows == 1
    with conn.cursor() as cur:
        cur.execute("INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES ('tenants', '[7]', 5)")
    result = writer.apply_many([("a", [event(INSERT, 7, 4), event(INSERT, 8, 1)])], [])
    assert (result.applied, result.skipped, result.new_rows) == (1, 1, 0)
    assert 7 not in names(conn), "the tombstone outranks the insert: the row stays deleted"
    assert names(conn)[8] == ("from a", 1)
    # while the table has a tombstone, its new rows are read first (no retry each batch)
    assert writer.apply_many([("a", [event(INSERT, 9, 1)])], []).new_rows == 0
    with conn.cursor() as cur:
        cur.execute("DELETE FROM zonesync.tombstones")
    writer.apply_many([("a", [event(INSERT, 10, 1)])], [])  # looks again: the table is clean
    assert writer.apply_many([("a", [event(INSERT, 11, 1)])], []).new_rows == 1


def test_a_batch_of_only_inserts_is_not_merged_unless_a_key_repeats(zone_b):
    """Inserts alone go in unmerged; a key that repeats (in the batch, or from another
    source in the same transaction) fails that INSERT, and the batch is applied again
    read-first, merged and guarded by version."""
    writer, conn = zone_b
    result = writer.apply_many([("a", [event(INSERT, 1, 1), event(INSERT, 2, 1)])], [])
    assert (result.applied, result.new_rows) == (2, 2)
    twice = [event(INSERT, 3, 1, name="first"), event(INSERT, 3, 2, name="second"), event(INSERT, 4, 1)]
    result = writer.apply_many([("a", twice)], [])
    assert (result.applied, result.new_rows) == (3, 0)
    assert names(conn)[3] == ("second", 2) and names(conn)[4] == ("from a", 1)
    # two sources inserting one key are two rows (S004-36): the first lands, the second is
    # skipped when older, and locks the row when newer, never an update of the other's row
    both = [("a", [event(INSERT, 5, 3, name="a's")]), ("c", [event(INSERT, 5, 7, name="c's")])]
    result = writer.apply_many(both, [])
    assert names(conn)[5] == ("a's", 3) and [pk for _, _, pk, _ in result.locked] == ["[5]"]
    both = [("a", [event(INSERT, 6, 9, name="a's")]), ("c", [event(INSERT, 6, 7, name="c's")])]
    result = writer.apply_many(both, [])
    assert names(conn)[6] == ("a's", 9) and result.locked == []
