"""Copy mode (seed 000, Incremental Copy; decide.py "Copy mode"): while an online full copy
fills a table in a zone (the table listed in that zone's zonesync.copy_tables), the zone's
applier takes every source's changes of it by version alone: an update of a row the
target lacks lands as the full new row (S000-73), a delete of one leaves its tombstone
(S000-76), a replayed change older than the target's row is skipped, and nothing waits,
locks or halts. The applier reads the list once a second: entering and leaving copy mode
needs no restart, and out of it the normal rules are back (an update of a row the target
lacks waits, then locks the row after `behind_timeout`).

The copy writes the same keys on its own connections meanwhile, and the applier's read
locks only the rows it found: a row the copy commits between the applier's read and its
write is kept when newer (the statements are version-guarded, write_plan.py).
"""

from __future__ import annotations

import pytest

from tests.support.background import wait_until
from tests.support.binlog import position
from tests.support.events import change_event
from tests.support.replication import Cluster, alerts, reset_state, row_locks
from zonesync.apply.batch import target_rows
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.tools.progress import wait_applied
from zonesync.events import DELETE, UPDATE

pytestmark = pytest.mark.integration

RUN = "test-copy-run"


def copy_mode(conn, table: str, on: bool) -> None:
    """List the table in (or remove it from) the zone's zonesync.copy_tables, as a copy run does."""
    with conn.cursor() as cur:
        if on:
            cur.execute("INSERT INTO zonesync.copy_tables (table_name, run_id) VALUES (%s, %s)", (table, RUN))
        else:
            cur.execute("DELETE FROM zonesync.copy_tables WHERE table_name = %s", (table,))


def tenant(conn, tenant_id: int):
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM zonesync_app.tenants WHERE tenant_id = %s", (tenant_id,))
        return cur.fetchone()


def tombstone(conn, table: str, pk: str):
    with conn.cursor() as cur:
        cur.execute("SELECT version FROM zonesync.tombstones WHERE table_name = %s AND pk = %s", (table, pk))
        found = cur.fetchone()
    return None if found is None else int(found[0])


def unlogged(conn, *statements) -> None:
    """Statements the zone's replicator never sees (as if the rows had been there before capture)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for sql in statements:
            cur.execute(sql)
        cur.execute("SET SESSION sql_log_bin = 1")


@pytest.fixture
def mesh(zones, meta, broker, test_cfg):
    """Zones a, b, c replicating (appliers with a 1 s `behind_timeout`), and a connection to each."""
    reset_state(zones, meta)
    conns = {z: zones[z].connect() for z in ("a", "b", "c")}
    copy_mode(conns["b"], "tenants", False)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file)
    cluster.start(behind_timeout=1.0)
    cluster.wait_started()
    try:
        yield cluster, conns
    finally:
        cluster.stop()
        copy_mode(conns["b"], "tenants", False)
        reset_state(zones, meta)
        for conn in conns.values():
            conn.close()


def test_a_table_in_copy_mode_takes_changes_by_version_alone_until_it_leaves_it(mesh, meta):
    cluster, conns = mesh
    a, b, c = conns["a"], conns["b"], conns["c"]
    applier_b = cluster.appliers["b"]
    # a and c hold tenants 1-3 at version 10; b lacks 1 and 2 (the copy has not brought them yet)
    # and holds 3 at version 20 (the copy read it after a change the stream has not delivered)
    seeded = "INSERT INTO zonesync_app.tenants (tenant_id, name, created_at, _zs_origin, _zs_version) VALUES "
    for conn in (a, c):
        unlogged(conn, seeded + "(1, 'one', '2024-01-01', 1, 10), (2, 'two', '2024-01-01', 1, 10), "
                 "(3, 'three', '2024-01-01', 1, 10)")  # fmt: skip
    unlogged(b, seeded + "(3, 'copied later', '2024-01-01', 1, 20)")

    copy_mode(b, "tenants", True)
    wait_until(lambda: "tenants" in applier_b.copying, 5, "b's applier takes tenants in copy mode (no restart)")

    start = position(a)
    with a.cursor() as cur:
        cur.execute("UPDATE zonesync_app.tenants SET name = 'updated in a', _zs_version = 11 WHERE tenant_id = 1")
        cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id = 2")
        cur.execute("UPDATE zonesync_app.tenants SET name = 'older than b', _zs_version = 11 WHERE tenant_id = 3")
    end = position(a)
    assert end != start
    assert wait_applied(meta, b, "a", end, timeout=30), "b applied a's three changes"

    # S000-73: the update of a row b lacked landed as a's full row (every column, version and origin)
    assert tenant(b, 1) == tenant(a, 1) and tenant(b, 1)[1] == "updated in a"
    # S000-76: the delete of a row b lacked left its tombstone (the deleted row's version + 1)
    assert tenant(b, 2) is None and tombstone(b, "tenants", "[2]") == 11
    # the replayed update older than b's row was skipped
    assert (tenant(b, 3)[1], tenant(b, 3)[-1]) == ("copied later", 20)
    # nothing waited into a lock, nothing halted
    assert alerts(meta, "b", "row_locked") == [] and alerts(meta, "b", "partition_halted") == []
    assert row_locks(cluster.zones["b"]) == 0
    # (c, out of copy mode, had the rows: a's changes applied there by the normal rules)
    wait_until(lambda: tenant(c, 3) is not None and tenant(c, 3)[1] == "older than b", 20, "c applied a's update")

    # Out of copy mode (no restart): an update of a row b lacks waits, then locks it after behind_timeout
    copy_mode(b, "tenants", False)
    wait_until(lambda: "tenants" not in applier_b.copying, 5, "b's applier leaves copy mode")
    for conn in (a, c):
        unlogged(conn, seeded + "(4, 'four', '2024-01-01', 1, 10)")
    with a.cursor() as cur:
        cur.execute("UPDATE zonesync_app.tenants SET name = 'after the copy', _zs_version = 11 WHERE tenant_id = 4")
    locked = wait_until(lambda: alerts(meta, "b", "row_locked"), 30, "b locks tenant 4 (normal rules)")
    assert [(x["table"], x["pk"]) for x in locked] == [("tenants", "[4]")]
    assert "did not arrive in time" in locked[0]["reason"], locked
    assert tenant(b, 4) is None, "the update of a row b lacks did not land"
    assert alerts(meta, "b", "partition_halted") == []


# -- the copy writing between the applier's read and its write ---------------------------------

DDL = (
    "CREATE TABLE zonesync_app.copy_rows (id BIGINT PRIMARY KEY, v VARCHAR(20), "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)"
)


def image(id_: int, v: str, version: int) -> dict:
    return {"id": id_, "v": v, "_zs_origin": 1, "_zs_version": version}


@pytest.fixture
def zone_b(zones, meta):
    """(a writer of zone b with copy_rows in copy mode, a connection to b) with copy_rows empty."""
    reset_state(zones, meta)
    conn = zones["b"].connect()
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS zonesync_app.copy_rows")
        cur.execute(DDL)
    writer = ZoneWriter("127.0.0.1", zones["b"].port, "root", "", "zonesync_app")
    writer.copying = frozenset({"copy_rows"})
    try:
        yield writer, conn
    finally:
        writer.close()
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS zonesync_app.copy_rows")
        conn.close()
        reset_state(zones, meta)


def test_rows_the_copy_commits_after_the_appliers_read_are_kept_when_newer(zone_b, monkeypatch):
    """The applier reads copy_rows 1-4 absent; before it writes, the copy commits 1 and 3 newer
    than the stream's changes and 2 and 4 older. The guarded statements keep 1 and 3, write a's
    row over 2 and delete 4; the tombstones of 3 and 4 are written as always. One read: no
    statement failed and nothing was applied again."""
    writer, conn = zone_b
    copied = [image(1, "copy newer", 20), image(2, "copy older", 2), image(3, "copy newer", 20), image(4, "old", 2)]
    reads = []
    read = target_rows.read

    def read_then_the_copy_writes(*args, **kw):
        found = read(*args, **kw)
        if not reads:  # the copy's rows land after the applier's read (no gap locks: READ COMMITTED)
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO zonesync_app.copy_rows VALUES (%(id)s, %(v)s, 1, %(_zs_version)s)", copied)
        reads.append(found[0])
        return found

    monkeypatch.setattr(target_rows, "read", read_then_the_copy_writes)

    def event(lsn: int, op: str, id_: int, new=None):
        return change_event(lsn=lsn, prev_lsn=lsn - 10, op=op, table="copy_rows", pk={"id": id_}, version=6,
                            old=image(id_, "before", 5), new=new)  # fmt: skip

    events = [
        event(10, UPDATE, 1, image(1, "a's row", 6)),
        event(20, UPDATE, 2, image(2, "a's row", 6)),
        event(30, DELETE, 3),
        event(40, DELETE, 4),
    ]
    writer.ensure_positions([("a", 0)])
    result = writer.apply_many([("a", events)], [("a", 0, 40, 3, 0, 4)])

    assert reads == [{}], "one read, which found none of the rows"
    assert (result.applied, result.skipped, result.locked) == (4, 0, [])
    with conn.cursor() as cur:
        cur.execute("SELECT id, v, _zs_version FROM zonesync_app.copy_rows ORDER BY id")
        assert cur.fetchall() == ((1, "copy newer", 20), (2, "a's row", 6), (3, "copy newer", 20))
    assert tombstone(conn, "copy_rows", "[3]") == 6 and tombstone(conn, "copy_rows", "[4]") == 6

    # the same changes replayed (the applier forgot its position): the rows stay as they are
    with conn.cursor() as cur:
        cur.execute("UPDATE zonesync.apply_state SET applied_lsn = 0")
    result = writer.apply_many([("a", events)], [("a", 0, 40, 3, 0, 4)])
    assert (result.applied, result.skipped) == (0, 4)
