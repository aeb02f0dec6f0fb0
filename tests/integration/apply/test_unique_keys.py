"""Unique secondary keys in the target.

A unique value that moves from a deleted row to a new one (S003-21): the delete goes
first, so the target never meets the value twice, and its binlog says what happened
(a delete and an insert, not an update that turns one row into the other).

A unique value that moves by update (S003-22) and meets itself out of the source's
order (merged per key, or on two workers) is applied again serially in source order:
never dropped, never a data lock; a value serial order cannot place (another row holds
it in the target) halts its partition with an alert (writer.py, "Unique keys")."""

from __future__ import annotations

import pytest
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from tests.support.background import wait_until
from tests.support.binlog import open_stream, position
from tests.support.events import change_event
from tests.support.replication import Cluster, alerts, reset_state
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.errors import PartitionsStopped
from zonesync.apply.tools import progress
from zonesync.events import DELETE, INSERT, UPDATE, partition_of

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


# -- S003-22: a unique value that moves by update, applied out of the source's order --------
@pytest.fixture
def uniq(zones, meta):
    """Zone b with an empty uniq_rows, no replication state; (writer, a second writer, conn)."""
    reset_state(zones, meta)
    inst = zones["b"]
    conn = inst.connect()
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS zonesync_app.uniq_rows")
        cur.execute(DDL)
        cur.execute("SET SESSION skip_replication = 1")
    writers = [ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app") for _ in range(2)]
    try:
        yield *writers, conn
    finally:
        for w in writers:
            w.close()
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS zonesync_app.uniq_rows")
        conn.close()
        reset_state(zones, meta)


def rows(conn) -> dict[int, tuple[int, str]]:
    with conn.cursor() as cur:
        cur.execute("SELECT id, u, v FROM zonesync_app.uniq_rows")
        return {i: (u, v) for i, u, v in cur.fetchall()}


def state(conn) -> dict[int, tuple[int, int, str]]:
    """Source a's partitions: (applied LSN, Kafka offset, status)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state WHERE source_zone = 'a'"
        )
        return {p: (lsn, off, st) for p, lsn, off, st in cur.fetchall()}


def move(lsn: int, id_: int, u_from: int, u_to: int, version: int, partition: int, v: str = "x"):
    return change_event(lsn=lsn, op=UPDATE, table="uniq_rows", pk={"id": id_}, version=version, partition=partition,
                        old=image(id_, u_from, v, version - 1), new=image(id_, u_to, v, version))  # fmt: skip


def test_values_swapped_in_one_batch_are_applied_in_source_order(uniq):
    """X 5 -> 9, Y 6 -> 5, X 9 -> 6: merged per key, X 5 -> 6 meets Y's 6. The batch is
    applied again one event at a time in LSN order: no lock, nothing dropped."""
    writer, _, conn = uniq
    with conn.cursor() as cur:
        cur.execute("INSERT INTO zonesync_app.uniq_rows VALUES (1, 5, 'x', 1, 1), (2, 6, 'y', 1, 1)")
    x1, y, x2 = move(10, 1, 5, 9, 2, 0), move(20, 2, 6, 5, 2, 1, "y"), move(30, 1, 9, 6, 3, 0)
    x2.prev_lsn, y.prev_lsn = 10, 0
    result = writer.apply_many([("a", [x1, x2]), ("a", [y])], [("a", 0, 30, 7, 0), ("a", 1, 20, 8, 0)])
    assert (result.applied, result.skipped, result.locked) == (3, 0, [])
    assert rows(conn) == {1: (6, "x"), 2: (5, "y")}
    assert state(conn) == {0: (30, 7, "running"), 1: (20, 8, "running")}


def test_a_value_taken_before_the_other_worker_freed_it_is_retried_not_merged_into_that_row(uniq):
    """Two workers: Y's partition takes u = 5 (a new row) before X's worker moved X off it.
    An upsert would have turned X into Y (ON DUPLICATE KEY UPDATE on the unique key); the
    INSERT fails, the serial retry too, and Y's partition stops there while the rest of the
    batch commits. Once X moved, Y's events apply: never dropped, never a data lock."""
    w1, w2, conn = uniq
    with conn.cursor() as cur:
        cur.execute("INSERT INTO zonesync_app.uniq_rows VALUES (1, 5, 'x', 1, 1)")
    y = change_event(lsn=20, prev_lsn=0, op=INSERT, table="uniq_rows", pk={"id": 2}, version=3, partition=1,
                     new=image(2, 5, "y", 3))  # fmt: skip
    z = change_event(lsn=25, prev_lsn=0, op=INSERT, table="uniq_rows", pk={"id": 3}, version=3, partition=2,
                     new=image(3, 8, "z", 3))  # fmt: skip
    w1.ensure_positions([("a", 1), ("a", 2)])
    with pytest.raises(PartitionsStopped) as caught:
        w2.apply_many([("a", [y]), ("a", [z])], [("a", 1, 20, 4, 0), ("a", 2, 25, 5, 0)])
    ((source, partition, lsn, detail, kind),) = caught.value.blocked
    assert (source, partition, lsn, kind) == ("a", 1, 20, "unique")
    assert "Duplicate entry '5'" in detail and "uniq_rows" in detail
    assert caught.value.result.applied == 1, "the other partition's row committed"
    assert rows(conn) == {1: (5, "x"), 3: (8, "z")}, "X is untouched; Y is not written"
    assert state(conn) == {1: (0, -1, "running"), 2: (25, 5, "running")}, "Y's partition stays before it"
    w1.apply_many([("a", [move(10, 1, 5, 6, 2, 0)])], [])
    result = w2.apply_many([("a", [y])], [("a", 1, 20, 4, 0)])
    assert (result.applied, result.locked) == (1, [])
    assert rows(conn) == {1: (6, "x"), 2: (5, "y"), 3: (8, "z")}
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
        assert cur.fetchone() == (0,)


def test_a_stopped_partition_keeps_what_it_applied_before_the_conflict(uniq):
    """A partition whose second event conflicts records its first (LSN), and keeps its
    Kafka offset: its messages are read again and the applied event skipped by LSN."""
    writer, _, conn = uniq
    with conn.cursor() as cur:
        cur.execute("INSERT INTO zonesync_app.uniq_rows VALUES (1, 5, 'x', 1, 1)")
        cur.execute(
            "INSERT INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset) "
            "VALUES ('a', 1, 0, 3)"
        )
    first = change_event(lsn=10, prev_lsn=0, op=INSERT, table="uniq_rows", pk={"id": 4}, version=2, partition=1,
                         new=image(4, 9, "w", 2))  # fmt: skip
    second = change_event(lsn=20, prev_lsn=10, op=INSERT, table="uniq_rows", pk={"id": 2}, version=3, partition=1,
                          new=image(2, 5, "y", 3))  # fmt: skip
    with pytest.raises(PartitionsStopped):
        writer.apply_many([("a", [first, second])], [("a", 1, 20, 6, 0)])
    assert rows(conn) == {1: (5, "x"), 4: (9, "w")}
    assert state(conn)[1] == (10, 3, "running")


def test_real_zones_retry_a_unique_conflict_across_workers_serially(zones, meta, broker, test_cfg, caplog):
    """X and Y in partitions of different workers; in a, X.u 5 -> 6, then Y.u 7 -> 5. b's
    worker for X is held on X's row (a local transaction), so Y's worker meets u = 5 still
    on X: its share stops at Y, the pass restarts, and the next rounds go whole on one
    connection in source order. Y lands once X moved; no lock, no halt, nothing dropped."""
    partitions, a, b = 4, zones["a"].connect(), zones["b"].connect()
    x, y = _ids_on_different_workers(partitions)
    cluster = _uniq_cluster(zones, meta, broker, test_cfg, a, b, partitions)
    holder = zones["b"].connect()
    try:
        with a.cursor() as cur:
            cur.execute(f"INSERT INTO zonesync_app.uniq_rows VALUES ({x}, 5, 'x', 1, 1), ({y}, 7, 'y', 1, 1)")
        _wait(lambda: len(rows(b)) == 2, "the rows reach b")
        with holder.cursor() as cur:  # X's worker waits for this
            cur.execute("BEGIN")
            cur.execute(f"SELECT * FROM zonesync_app.uniq_rows WHERE id = {x} FOR UPDATE")
        with caplog.at_level("WARNING"), a.cursor() as cur:
            cur.execute(f"UPDATE zonesync_app.uniq_rows SET u = 6, _zs_version = 2 WHERE id = {x}")
            cur.execute(f"UPDATE zonesync_app.uniq_rows SET u = 5, _zs_version = 2 WHERE id = {y}")
            _wait(lambda: "partition stopped before it" in caplog.text, "Y's worker meets the conflict")
            assert rows(b) == {x: (5, "x"), y: (7, "y")}, "nothing of X or Y yet"
            holder.rollback()  # X's worker goes on; the pass restarts once it committed
            _wait(lambda: rows(b) == {x: (6, "x"), y: (5, "y")}, "b converges")
        assert "Duplicate entry '5'" in caplog.text and "retrying serially" in caplog.text
        with b.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
            assert cur.fetchone() == (0,), "never a data lock"
        assert {st for _, _, st in state(b).values()} == {"running"}
        assert alerts(meta, "b", "partition_halted") == []
    finally:
        holder.close()
        _stop_uniq_cluster(cluster, zones, meta, a, b)


def test_real_zones_halt_a_unique_conflict_serial_order_cannot_fix(zones, meta, broker, test_cfg):
    """b holds a row of its own with u = 9 that a never heard of; a inserts another row with
    u = 9. Serial order cannot place it: after `unique_conflict_timeout` the partition halts
    with an alert naming the conflict (no lock, no loop); other partitions go on. After the
    fix, `zonesync resume` lets the row in."""
    partitions, a, b = 4, zones["a"].connect(), zones["b"].connect()
    w, v = _ids_on_different_workers(partitions)
    stuck = partition_of("uniq_rows", f"[{w}]", partitions)
    cluster = _uniq_cluster(zones, meta, broker, test_cfg, a, b, partitions, unique_conflict_timeout=1.5)
    try:
        with b.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
            cur.execute("INSERT INTO zonesync_app.uniq_rows VALUES (100000, 9, 'b only', 2, 1)")
        with a.cursor() as cur:
            cur.execute(f"INSERT INTO zonesync_app.uniq_rows VALUES ({w}, 9, 'w', 1, 1)")
            cur.execute(f"INSERT INTO zonesync_app.uniq_rows VALUES ({v}, 10, 'v', 1, 1)")
        _wait(lambda: state(b).get(stuck, (0, 0, ""))[2] == "halted", "the partition halts", 30)
        assert rows(b) == {100000: (9, "b only"), v: (10, "v")}, "the other partition went on"
        (alert,) = alerts(meta, "b", "partition_halted")
        assert alert["partition"] == stuck and "unique key conflict in uniq_rows" in alert["detail"]
        assert "Duplicate entry '9'" in alert["detail"] and "zonesync resume" in alert["detail"]
        with b.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
            assert cur.fetchone() == (0,), "not a data lock"
            cur.execute("DELETE FROM zonesync_app.uniq_rows WHERE id = 100000")  # the fix
        assert progress.resume(b, "a") == [stuck]
        _wait(lambda: rows(b) == {w: (9, "w"), v: (10, "v")}, "the resumed partition applies")
    finally:
        _stop_uniq_cluster(cluster, zones, meta, a, b)


def _ids_on_different_workers(partitions: int) -> tuple[int, int]:
    """Two ids whose partitions differ (with as many workers as partitions: different workers)."""
    first = partition_of("uniq_rows", "[1]", partitions)
    other = next(i for i in range(2, 100) if partition_of("uniq_rows", f"[{i}]", partitions) != first)
    return 1, other


def _uniq_cluster(zones, meta, broker, test_cfg, a, b, partitions, **applier_kw) -> Cluster:
    """a's replicator and b's applier, every round on the workers (no small rounds)."""
    reset_state(zones, meta)
    for conn in (a, b):
        conn.autocommit(True)
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS zonesync_app.uniq_rows")
            cur.execute(DDL)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=partitions)
    cluster.start(zones=("a",), which=("replicator",))
    cluster.start(zones=("b",), which=("applier",), workers=partitions, small_round=0, **applier_kw)
    cluster.wait_started()
    return cluster


def _stop_uniq_cluster(cluster, zones, meta, a, b) -> None:
    cluster.stop()
    for conn in (a, b):
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS zonesync_app.uniq_rows")
        conn.close()
    reset_state(zones, meta)


def _wait(check, what: str, timeout: float = 20) -> None:
    wait_until(check, timeout, what, step=0.1)
