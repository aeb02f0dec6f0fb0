"""An insert that finds its key taken is an update only of its own row (S004-36, S003-20).

Seed 004 6.3: an `INSERT … ON DUPLICATE KEY UPDATE` met an unrelated row with the
same id and wrote over it. Here the row is locked instead (the data lock of an
old-row mismatch: row_locks, an alert, later changes held until `zonesync locks
resolve`), whatever the unrelated row's version; a replay of the same insert, or one
whose row was updated since, stays a no-op; a delete and an insert again flow as
always (decide.py, "Inserts meeting a row")."""

from __future__ import annotations

import time

import pymysql
import pytest

from tests.support.events import change_event
from tests.support.replication import alerts, checksum, reset_state, wait_converged
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.events import DELETE, INSERT, UPDATE, encode_row

pytestmark = pytest.mark.integration

_lsn = iter(range(1000, 10**9, 10))


def tenant(tenant_id: int, name: str, origin: int, version: int) -> dict:
    """A tenants row as an event carries it (every column)."""
    return {
        "tenant_id": tenant_id,
        "name": name,
        "created_at": {"$t": "2026-01-01T00:00:00"},
        "_zs_origin": origin,
        "_zs_version": version,
    }


def event(op: str, image: dict | None = None, old: dict | None = None, version: int | None = None):
    row = image or old
    return change_event(
        lsn=next(_lsn),
        op=op,
        table="tenants",
        pk={"tenant_id": row["tenant_id"]},
        version=version if version is not None else row["_zs_version"],
        new=image,
        old=old,
    )


@pytest.fixture
def zone_b(zones, meta):
    reset_state(zones, meta)
    writer = ZoneWriter("127.0.0.1", zones["b"].port, "root", "", "zonesync_app")
    conn = zones["b"].connect()
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
    try:
        yield writer, conn
    finally:
        writer.close()
        conn.close()
        reset_state(zones, meta)


def put(conn, row: dict) -> None:
    """A row written straight into the target (a local write, or one applied earlier)."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO zonesync_app.tenants (tenant_id, name, created_at, _zs_origin, _zs_version) "
            "VALUES (%s, %s, '2026-01-01 00:00:00', %s, %s)",
            (row["tenant_id"], row["name"], row["_zs_origin"], row["_zs_version"]),
        )


def stored(conn, tenant_id: int) -> dict | None:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM zonesync_app.tenants WHERE tenant_id = %s", (tenant_id,))
        found = cur.fetchone()
    return encode_row(found) if found else None


def locks(conn) -> dict[str, tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SELECT pk, reason, held_events FROM zonesync.row_locks WHERE table_name = 'tenants'")
        return {pk: (reason, held) for pk, reason, held in cur.fetchall()}


def test_an_insert_over_an_older_unrelated_row_locks_it(zone_b):
    """(a) b holds tenant 42 of its own (origin 2) at an older version than a's insert of
    another tenant 42: a version guard alone would overwrite it."""
    writer, conn = zone_b
    theirs = tenant(42, "b's own", 2, 100)
    put(conn, theirs)
    insert = event(INSERT, tenant(42, "a's", 1, 200))
    result = writer.apply_many([("a", [insert])], [])  # the new-rows INSERT fails over to the read
    assert (result.applied, result.skipped) == (0, 1)
    assert stored(conn, 42) == theirs, "the other entity's row is never written"
    ((source, table, pk, reason),) = result.locked
    assert (source, table, pk) == ("a", "tenants", "[42]")
    assert "insert meets another row with this key" in reason and "origin 2, version 100" in reason
    assert locks(conn)["[42]"] == (reason, 0)
    # the row's later changes are held, counted, until `zonesync locks resolve`
    later = event(UPDATE, tenant(42, "a's, later", 1, 300), old=tenant(42, "a's", 1, 200))
    assert writer.apply_many([("a", [later])], []).skipped == 1
    assert stored(conn, 42) == theirs and locks(conn)["[42]"][1] == 1


def test_a_replayed_insert_changes_nothing(zone_b):
    """(b) the target has the row as that insert wrote it (same origin, same version)."""
    writer, conn = zone_b
    row = tenant(7, "from a", 1, 100)
    assert writer.apply_many([("a", [event(INSERT, row)])], []).applied == 1
    for _ in range(2):  # the read-first path, then again with the table known
        result = writer.apply_many([("a", [event(INSERT, row)])], [])
        assert (result.applied, result.skipped, result.locked) == (0, 1, [])
    assert stored(conn, 7) == row and locks(conn) == {}


def test_an_insert_whose_row_was_updated_since_is_skipped(zone_b):
    """(c) the target holds a later version of the inserted row (updated in its zone, or in
    the zone it moved to): the replayed insert is skipped, and so is a replayed insert with
    its update; with only its update new, that update lands."""
    writer, conn = zone_b
    inserted, updated = tenant(8, "v1", 1, 100), tenant(8, "v2", 1, 150)
    later = tenant(8, "moved to b, updated there", 2, 180)
    put(conn, later)
    batch = [event(INSERT, inserted), event(UPDATE, updated, old=inserted)]
    for events in ([batch[0]], batch):
        result = writer.apply_many([("a", events)], [])
        assert (result.applied, result.skipped, result.locked) == (0, len(events), [])
        assert stored(conn, 8) == later
    with conn.cursor() as cur:  # the target at the insert's version: the update is new to it
        cur.execute("UPDATE zonesync_app.tenants SET name = 'v1', _zs_origin = 1, _zs_version = 100")
    result = writer.apply_many([("a", batch)], [])
    assert (result.applied, result.locked) == (2, [])
    assert stored(conn, 8) == updated


def test_a_delete_and_an_insert_again_flow(zone_b):
    """(d) a key deleted and inserted again: in separate batches (the tombstone is older
    than the new insert), merged in one (checked by the deleted row), and the replay of it
    all afterwards changes nothing."""
    writer, conn = zone_b
    first, second, third = tenant(9, "first", 1, 100), tenant(9, "second", 1, 200), tenant(9, "third", 1, 300)
    history = [
        event(INSERT, first),
        event(DELETE, old=first, version=101),
        event(INSERT, second),
        event(DELETE, old=second, version=201),
        event(INSERT, third),
    ]
    for e in history[:3]:
        assert writer.apply_many([("a", [e])], []).applied == 1
    assert stored(conn, 9) == second
    result = writer.apply_many([("a", history[3:])], [])  # merged: delete + insert
    assert (result.applied, result.locked) == (2, [])
    assert stored(conn, 9) == third
    result = writer.apply_many([("a", history)], [])  # a replay of all of it
    assert (result.applied, result.locked) == (0, [])
    assert stored(conn, 9) == third and locks(conn) == {}


def test_real_zones_lock_a_colliding_insert_and_let_a_reinsert_through(cluster, guard_env, zones, meta):
    """Through the replicators and appliers: b has a tenant 42 of its own that a never heard
    of (a key collision the table contract should have prevented, S002-14); a inserts its
    tenant 42. b locks the row and raises an alert, c takes a's row; a's later update is
    held in b. Meanwhile a's delete and insert again of tenant 7 reach everyone."""
    ga = guard_env("a")
    b = zones["b"].connect("zonesync_app")
    b.autocommit(True)
    try:
        with b.cursor() as cur:  # not replicated: a, c never hear of it
            cur.execute("SET SESSION skip_replication = 1")
            cur.execute("INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (42, 'b''s own', 2, 1)")
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 42, "name": "a's"})
            tx.insert("tenants", {"tenant_id": 7, "name": "first"})
        with ga.transaction() as tx:
            tx.update("tenants", {"tenant_id": 42}, {"name": "a's, later"})
            tx.delete("tenants", {"tenant_id": 7})
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 7, "name": "again"})
        deadline = time.monotonic() + 30
        while not (
            locks(b).get("[42]", ("", 0))[1] >= 1 and [r[1] for r in checksum(zones["c"])] == ["again", "a's, later"]
        ):
            assert time.monotonic() < deadline, f"b locks {locks(b)}, c {checksum(zones['c'])}"
            time.sleep(0.1)
        assert {r[0]: r[1] for r in checksum(zones["b"])} == {7: "again", 42: "b's own"}
        assert list(locks(b)) == ["[42]"], "only the colliding row is locked"
        assert "insert meets another row with this key" in locks(b)["[42]"][0]
        assert [(d["table"], d["pk"]) for d in alerts(meta, "b", "row_locked")] == [("tenants", "[42]")]
        assert alerts(meta, "c", "row_locked") == [] and alerts(meta, "a", "row_locked") == []
        wait_converged(zones, ("orders",))
    finally:
        b.close()
