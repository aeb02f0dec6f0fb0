"""Seed S002-11 (大事务如何更好地支持), the crash part: the replicator is killed -9 while it
streams a transaction larger than its large-transaction limit (lowered to LIMIT rows here,
so a transaction of a few thousand rows is "large").

Such a transaction is read twice: the first read only counts it (nothing is published and
the pass ends at its Xid), the second queues each rows event as it is read. The kill lands
in the second read, once part of it is on the broker. Zone a's replicator runs as a process
of its own (tests/support/replicator_process.py, started with the limit lowered and every
produce slowed, so the kill lands inside the streaming); zone b's applier runs throughout
and applies the part that arrived. What must hold:

- no checkpoint ever points inside the transaction (every checkpoint is at a transaction
  boundary of the binlog), and the one standing at the kill is before its GTID event;
- after the restart every row of the transaction arrives in b exactly once: b ends with
  exactly a's rows, its applier applied every change once (the copies re-published after
  the restart, identical to their first copies, were skipped), and `zonesync reconcile`
  finds the published and committed counts equal in every partition;
- every event of the transaction carries its row count and a row index of its own.
"""

from __future__ import annotations

import subprocess
import time

import msgspec
import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support import replicator_process
from tests.support.background import wait_until
from tests.support.binlog import position
from tests.support.replication import (
    Cluster,
    alerts,
    checksum,
    reset_state,
    settled_reconciliation,
)
from zonesync.apply.reconcile import OK
from zonesync.capture.checkpoints import CheckpointStore
from zonesync.events import decode_message, file_number

pytestmark = pytest.mark.integration

PARTITIONS = 4
LIMIT = 300  # the replicator's large_txn_rows in this test
PRE = 20  # tenants 0..19, small transactions before the large one
BIG_INSERTS = 4000  # tenants 100001..104000, inserted by the large transaction
BIG_ROWS = BIG_INSERTS + PRE  # it also updates the PRE tenants
POST = 3  # single-row updates after it
THROTTLE = 0.05  # seconds after each message the first process produces


@pytest.fixture
def mesh(meta, zones, broker, test_cfg, tmp_path):
    """(a cluster on fresh topics with no worker started, the replicator processes to stop,
    their log), from and back to clean replication state."""
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    started: list[subprocess.Popen] = []
    log = tmp_path / "replicator-a.log"
    yield cluster, started, log
    for proc in started:
        replicator_process.stop(proc)
    cluster.stop()
    reset_state(zones, meta)
    if log.exists():
        print("replicator-a log (tail):\n" + "\n".join(log.read_text().splitlines()[-30:]))


def _wait(cond, what: str, timeout: float = 30.0, step: float = 0.05):
    return wait_until(cond, timeout, what, step=step)


def _messages(consumer, topic: str) -> int:
    return sum(
        consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1] for p in range(PARTITIONS)
    )


def _read_topic(cluster) -> dict[int, list]:
    """LSN -> every copy of that event on zone a's topic, in offset order."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "capture-crash-read"})
    try:
        topic = cluster.topic("a")
        highs = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(PARTITIONS)]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        done = [0] * PARTITIONS
        copies: dict[int, list] = {}
        deadline = time.monotonic() + 30
        while any(d < h for d, h in zip(done, highs, strict=True)):
            assert time.monotonic() < deadline, f"topic not read to its end: {done} of {highs}"
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            done[msg.partition()] = msg.offset() + 1
            for event in decode_message(msg.value()):
                copies.setdefault(event.lsn, []).append(event)
        return copies
    finally:
        consumer.close()


def _checkpoints(meta) -> list:
    store = CheckpointStore(meta, "a")
    try:
        return store.history()
    finally:
        store.close()


def _boundaries(conn, log_file: str) -> set[int]:
    """Positions of a binlog file that are not inside a transaction: the end of an Xid (or
    COMMIT) closing a BEGIN group, of a DDL's group, and of any event outside a group."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{log_file}'")
        events = cur.fetchall()
    out, in_txn, ddl = {4}, False, False
    for _log, _pos, kind, _server, end, info in events:
        if kind == "Gtid":
            in_txn, ddl = True, not info.startswith("BEGIN")
        elif in_txn and (kind == "Xid" or (kind == "Query" and (ddl or info.strip().upper() == "COMMIT"))):
            in_txn = False
            out.add(int(end))
        elif not in_txn:
            out.add(int(end))
    return out


def _assert_never_inside(conn, checkpoints, span) -> None:
    boundaries = {f: _boundaries(conn, f) for f in {cp.log_file for cp in checkpoints}}
    inside = [(cp.log_file, cp.log_pos) for cp in checkpoints if cp.log_pos not in boundaries[cp.log_file]]
    assert not inside, f"checkpoints inside a transaction: {inside}"
    log_file, start, end = span
    assert not [cp for cp in checkpoints if cp.log_file == log_file and start < cp.log_pos < end], (
        "a checkpoint inside the large transaction"
    )


def _applied_through(inst, last: dict[int, int]) -> bool:
    with inst.connect().cursor() as cur:
        cur.execute("SELECT partition_no, applied_lsn FROM zonesync.apply_state WHERE source_zone = 'a'")
        applied = {int(p): int(lsn) for p, lsn in cur.fetchall()}
    return all(applied.get(p, 0) >= lsn for p, lsn in last.items())


def test_kill_9_while_a_large_transaction_is_streamed(mesh, zones, meta):
    """S002-11"""
    cluster, started, log = mesh
    conn = zones["a"].connect("zonesync_app")
    watch = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "capture-crash-watch"})
    try:
        cluster.start(which=("applier",), zones=("b",))
        started.append(replicator_process.spawn(cluster, "a", log, throttle=THROTTLE, large_txn_rows=LIMIT))
        _wait(lambda: _checkpoints(meta), "the replicator took its start position")
        with conn.cursor() as cur:
            for t in range(PRE):
                cur.execute(
                    "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, 'pre', 1, 1)", (t,)
                )
        big_file, big_start = position(conn)
        _wait(
            lambda: (
                (file_number(_checkpoints(meta)[-1].log_file), _checkpoints(meta)[-1].log_pos)
                >= (file_number(big_file), big_start)
            ),
            "the small transactions were checkpointed",
        )
        base = _messages(watch, cluster.topic("a"))

        conn.begin()
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) "
                f"SELECT 100000 + seq, CONCAT('big ', seq), 1, 1 FROM seq_1_to_{BIG_INSERTS}"
            )
            cur.execute("UPDATE tenants SET name = 'pre +big', _zs_version = 2 WHERE tenant_id < %s", (PRE,))
            conn.commit()
            cur.execute("SELECT @@last_gtid")
            gtid = cur.fetchone()[0]
            cur.execute(f"SHOW BINLOG EVENTS IN '{big_file}' FROM {big_start}")
            events = cur.fetchall()
        assert events[0][2] == "Gtid" and events[0][5].startswith("BEGIN"), events[0]
        span = (big_file, int(events[0][1]), int(next(e for e in events if e[2] == "Xid")[4]))
        # kill -9 once part of it is on the broker: it is streamed, the first read published nothing
        _wait(lambda: _messages(watch, cluster.topic("a")) >= base + 3, "the streaming began", step=0.005)
        replicator_process.kill(started[-1])
    finally:
        watch.close()

    before = _read_topic(cluster)
    big_before = {lsn for lsn, copies in before.items() if copies[0].txn_id == gtid}
    assert 0 < len(big_before) < BIG_ROWS, f"{len(big_before)} of {BIG_ROWS} rows published before the kill"
    checkpoints = _checkpoints(meta)
    _assert_never_inside(conn, checkpoints, span)
    at_kill = checkpoints[-1]
    assert (file_number(at_kill.log_file), at_kill.log_pos) <= (file_number(big_file), span[1]), (
        "the checkpoint at the kill is before the large transaction"
    )
    # b applies the part that arrived (held for its transaction's end, then applied in parts)
    last: dict[int, int] = {}
    for lsn, copies in before.items():
        last[copies[0].partition] = max(last.get(copies[0].partition, 0), lsn)
    _wait(lambda: _applied_through(zones["b"], last), "b applied what the broker holds")

    with conn.cursor() as cur:  # written while no replicator runs
        for t in range(POST):
            cur.execute("UPDATE tenants SET name = 'post', _zs_version = 3 WHERE tenant_id = %s", (t,))
    started.append(replicator_process.spawn(cluster, "a", log, large_txn_rows=LIMIT))
    _wait(lambda: checksum(zones["b"]) == checksum(zones["a"]), "b converged with a", timeout=60, step=0.2)
    rows = checksum(zones["b"])
    assert len(rows) == PRE + BIG_INSERTS
    assert {r[0]: (r[1], r[4]) for r in rows if r[0] < PRE} == {
        t: ("post", 3) if t < POST else ("pre +big", 2) for t in range(PRE)
    }

    # every event of the transaction: once more after the restart where it had gone out before
    after = _read_topic(cluster)
    big = {lsn: copies for lsn, copies in after.items() if copies[0].txn_id == gtid}
    assert len(big) == BIG_ROWS and len(after) == PRE + BIG_ROWS + POST
    assert {lsn for lsn, copies in big.items() if len(copies) > 1} == big_before
    assert all(len(copies) <= 2 for copies in after.values())
    for lsn, copies in after.items():
        if len(copies) == 2:
            assert copies[1].is_retry, f"LSN {lsn} published again without is_retry"
            first, again = (msgspec.structs.replace(e, is_retry=False) for e in copies)
            assert first == again, f"the re-published event {lsn} differs from its first copy"
    assert {copies[0].row_count for copies in big.values()} == {BIG_ROWS}
    assert sorted(copies[0].row_index for copies in big.values()) == list(range(BIG_ROWS))

    # exactly once in b: every change applied once, the counts of both ends equal
    applier = cluster.appliers["b"]
    _wait(lambda: applier.applied >= PRE + BIG_ROWS + POST, "b counted its applied changes", timeout=10)
    assert applier.applied == PRE + BIG_ROWS + POST, "a change of the transaction was applied twice"
    reconciled = settled_reconciliation(meta, zones, "b", ["a"], timeout=20)
    assert reconciled and all(r.status == OK for r in reconciled), reconciled
    assert alerts(meta, "b", "row_locked") == [] and alerts(meta, "b", "partition_halted") == []

    # and no checkpoint since points inside it either; the last one is past it
    checkpoints = _checkpoints(meta)
    _assert_never_inside(conn, checkpoints, span)
    assert (file_number(checkpoints[-1].log_file), checkpoints[-1].log_pos) >= (file_number(big_file), span[2])
    conn.close()
