"""S000-48 at the writer: a change whose row's earlier versions have not arrived waits.

Zone c holds a row at version 1 (a's). Ownership moved to b, which applied a's update to
version 2 and then updated the row to version 3; b's update reaches c first. Its old row
(version 2) is newer than c's row: c is behind, not changed behind the applier's back,
so the writer stops that partition before the update (nothing written, its position
not moved) and commits the rest of the batch. Once a's update is in the same batch,
serial order (by commit time across sources) applies a's first, then b's: no lock.
Past the applier's `behind_timeout` the row is locked instead (`expired_waits`).
A row changed behind the applier's back at the old row's version is still locked at once.
"""

from __future__ import annotations

import pytest

from tests.support.events import change_event
from tests.support.replication import reset_state
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.bookkeeping.row_locks import lock_list
from zonesync.apply.errors import PartitionsStopped
from zonesync.events import INSERT, UPDATE

pytestmark = pytest.mark.integration

DDL = (
    "CREATE TABLE zonesync_app.wait_rows (id BIGINT PRIMARY KEY, v VARCHAR(20), "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)"
)


def image(v: str, version: int, origin: int, id_: int = 1) -> dict:
    return {"id": id_, "v": v, "_zs_origin": origin, "_zs_version": version}


@pytest.fixture
def zone_c(zones, meta):
    """(writer, autocommit connection) for zone c with wait_rows holding row 1 at a's version 1."""
    reset_state(zones, meta)
    conn = zones["c"].connect()
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS zonesync_app.wait_rows")
        cur.execute(DDL)
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute("INSERT INTO zonesync_app.wait_rows VALUES (1, 'born', 1, 1)")
    writer = ZoneWriter("127.0.0.1", zones["c"].port, "root", "", "zonesync_app")
    try:
        yield writer, conn
    finally:
        writer.close()
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS zonesync_app.wait_rows")
            cur.execute("DELETE FROM zonesync.row_locks WHERE table_name = 'wait_rows'")
        conn.close()
        reset_state(zones, meta)


def rows(conn) -> dict[int, tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SELECT id, v, _zs_version FROM zonesync_app.wait_rows")
        return {i: (v, ver) for i, v, ver in cur.fetchall()}


def applied(conn) -> dict[tuple[str, int], int]:
    with conn.cursor() as cur:
        cur.execute("SELECT source_zone, partition_no, applied_lsn FROM zonesync.apply_state")
        return {(s, p): lsn for s, p, lsn in cur.fetchall()}


def a_late_update():
    """a's last update of row 1 (version 1 -> 2), committed before ownership moved."""
    return change_event(lsn=50, prev_lsn=0, op=UPDATE, table="wait_rows", pk={"id": 1}, version=2, source_zone="a",
                        old=image("born", 1, 1), new=image("a late", 2, 1), commit_ts=1000)  # fmt: skip


def b_update():
    """b's update of row 1 (version 2 -> 3), after it applied a's update."""
    return change_event(lsn=100, prev_lsn=0, op=UPDATE, table="wait_rows", pk={"id": 1}, version=3, source_zone="b",
                        old=image("a late", 2, 1), new=image("b owns", 3, 2), commit_ts=2000)  # fmt: skip


def b_insert(lsn: int = 200):
    """Another of b's rows, in another partition."""
    return change_event(lsn=lsn, prev_lsn=0, op=INSERT, table="wait_rows", pk={"id": 2}, version=5, partition=1,
                        source_zone="b", new=image("other", 5, 2, id_=2), commit_ts=2100)  # fmt: skip


def test_an_update_whose_earlier_version_has_not_arrived_waits_then_lands_after_it(zone_c):
    writer, conn = zone_c
    writer.ensure_positions([("a", 0), ("b", 0), ("b", 1)])
    with pytest.raises(PartitionsStopped) as caught:
        writer.apply_many([("b", [b_update()]), ("b", [b_insert()])], [("b", 0, 100, 7, 0, 1), ("b", 1, 200, 3, 0, 1)])
    ((source, partition, lsn, detail, kind),) = caught.value.blocked
    assert (source, partition, lsn, kind) == ("b", 0, 100, "behind")
    assert "behind the event's old row" in detail and "wait_rows" in detail, detail
    assert caught.value.result.applied == 1 and caught.value.result.locked == [], "the other partition committed"
    assert rows(conn) == {1: ("born", 1), 2: ("other", 5)}, "row 1 untouched, not locked"
    assert lock_list(conn) == []
    assert applied(conn) == {("a", 0): 0, ("b", 0): 0, ("b", 1): 200}, "b's partition 0 stays before the update"

    # a's late update arrives: in one batch with b's update (b's listed first), source order puts a's first
    result = writer.apply_many(
        [("b", [b_update()]), ("a", [a_late_update()])], [("b", 0, 100, 7, 0, 1), ("a", 0, 50, 4, 0, 1)]
    )
    assert (result.applied, result.locked) == (2, [])
    assert rows(conn)[1] == ("b owns", 3)
    assert lock_list(conn) == []
    assert applied(conn)[("b", 0)] == 100 and applied(conn)[("a", 0)] == 50


def test_an_update_of_a_row_not_yet_inserted_waits(zone_c):
    writer, conn = zone_c
    with conn.cursor() as cur:
        cur.execute("DELETE FROM zonesync_app.wait_rows")
    writer.ensure_positions([("b", 0)])
    with pytest.raises(PartitionsStopped) as caught:
        writer.apply_many([("b", [b_update()])], [("b", 0, 100, 7, 0, 1)])
    assert [(s.kind, s.lsn) for s in caught.value.blocked] == [("behind", 100)]
    assert "does not have yet" in caught.value.blocked[0].detail
    assert rows(conn) == {} and lock_list(conn) == []


def test_a_wait_past_its_timeout_locks_the_row(zone_c):
    """The applier names the event in `expired_waits` once it waited `behind_timeout`."""
    writer, conn = zone_c
    writer.ensure_positions([("b", 0)])
    with pytest.raises(PartitionsStopped):
        writer.apply_many([("b", [b_update()])], [("b", 0, 100, 7, 0, 1)])
    writer.expired_waits.add(("b", 0, 100))
    result = writer.apply_many([("b", [b_update()])], [("b", 0, 100, 7, 0, 1)])
    assert result.applied == 0 and [(s, t, pk) for s, t, pk, _ in result.locked] == [("b", "wait_rows", "[1]")]
    assert "did not arrive in time" in result.locked[0][3]
    assert rows(conn) == {1: ("born", 1)}
    assert [lock["pk"] for lock in lock_list(conn)] == [[1]]
    assert applied(conn)[("b", 0)] == 100, "the partition goes on past the locked row"


def test_a_row_changed_behind_the_appliers_back_is_locked_at_once(zone_c):
    """Same version as the old row, other values (an unguarded write in c): no waiting."""
    writer, conn = zone_c
    with conn.cursor() as cur:
        cur.execute("UPDATE zonesync_app.wait_rows SET v = 'rogue', _zs_version = 2 WHERE id = 1")
    writer.ensure_positions([("b", 0)])
    result = writer.apply_many([("b", [b_update()])], [("b", 0, 100, 7, 0, 1)])
    assert result.applied == 0 and len(result.locked) == 1
    assert "differs from the event's old row in v" in result.locked[0][3], result.locked
    assert rows(conn) == {1: ("rogue", 2)}
