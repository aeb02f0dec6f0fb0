"""Seed S000-52 (LSN 是单调递增的，通过 LSN 对比也能知道消息的先后顺序): within a source zone,
LSNs strictly increase in commit order, and comparing two LSNs gives their order, across
a binlog rotation (FLUSH BINARY LOGS), a kill -9 and restart of the replicator, and a
stop and start of the zone's mariadbd (which always begins a new binlog file).

Zone a is a mariadbd of this test alone (its own datadir and port: restarting it disturbs
no other test); its replicator is a process of its own (tests/support/replicator_process.py)
so that it can be killed -9. One client commits the transactions one after another, so the
commit order is the order the test issued them; each transaction inserts three rows and
updates one "clock" row, all named after the transaction. Read back from the topic:

- every change is there (re-published copies after the kill are identical to the first
  and marked is_retry);
- across all partitions, sorting by LSN gives the commit order exactly (and the GTID
  order, and commit times that never go back); within a transaction, the row order;
- per partition, the first copies arrive in increasing LSN order and each one's prev_lsn
  is the LSN before it: the chain is whole from 0, through every restart;
- the LSNs' file numbers step up at the rotation and at the server restart.
"""

from __future__ import annotations

import shutil
import time

import msgspec
import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support import replicator_process, topics
from tests.support.background import wait_until
from tests.support.replication import Cluster, latest_checkpoint, reset_state
from zonesync.dev import env, mariadb, procs
from zonesync.events import decode_message, file_number, split_lsn

pytestmark = pytest.mark.integration

PARTITIONS = 4
ROWS = 3  # inserted per transaction, besides the clock row's update
CLOCK = 1_000_000  # the row every transaction updates: its changes all go to one partition
PHASES = 5  # before the rotation, after it, while the replicator is down, before and after the server restart
PER_PHASE = 10


@pytest.fixture
def own_zone_a(zones, meta, broker, test_cfg, tmp_path):
    """(a private mariadbd standing in for zone a, a 4-partition cluster on fresh topics with
    a's instance in place of the shared one, replicator processes to stop, their log)."""
    inst = mariadb.Instance(
        "lsn-order-zone-a", procs.free_port(), 201, test_cfg.data_dir / "lsn-order-zone-a", gtid_domain_id=1
    )
    procs_started: list = []
    log = tmp_path / "replicator-a.log"
    mariadb.start(inst, test_cfg.run_dir, test_cfg.log_dir, test_cfg.data_dir)
    try:
        for path in [*sorted(env.ZONE_BOOKKEEPING.glob("*.sql")), env.SAMPLE_SCHEMA]:
            env._run_sql_file(inst, path)
        mesh = {**zones, "a": inst}
        reset_state(mesh, meta)
        cluster = Cluster(mesh, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
        yield inst, cluster, procs_started, log
    finally:
        for proc in procs_started:
            replicator_process.stop(proc)
        procs.stop(test_cfg.run_dir, inst.name)
        shutil.rmtree(inst.datadir, ignore_errors=True)
        reset_state(zones, meta)
        if log.exists():
            print("replicator-a log (tail):\n" + "\n".join(log.read_text().splitlines()[-30:]))


def _wait(cond, what: str, timeout: float = 30.0, step: float = 0.05):
    return wait_until(cond, timeout, what, step=step)


def _commit(inst, txns: range) -> None:
    """Transactions `txns`, one after another from one client: each inserts ROWS tenants and
    updates the clock row, every row named after its transaction."""
    conn = inst.connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            for t in txns:
                conn.begin()
                cur.execute(
                    "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES "
                    + ",".join(f"({t * ROWS + k}, 't{t}', 1, 1)" for k in range(ROWS))
                )
                cur.execute(
                    "UPDATE tenants SET name = %s, _zs_version = _zs_version + 1 WHERE tenant_id = %s", (f"t{t}", CLOCK)
                )
                conn.commit()
    finally:
        conn.close()


def _read_topic(cluster, expected: int, timeout: float = 60) -> dict[int, list]:
    """partition -> every event on zone a's topic, in offset order, once `expected` distinct
    LSNs arrived."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "lsn-order"})
    consumer.assign([TopicPartition(cluster.topic("a"), p, 0) for p in range(PARTITIONS)])
    out: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < expected:
            assert time.monotonic() < deadline, f"{len(seen)} of {expected} changes on the topic"
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            for event in decode_message(msg.value()):
                assert event.partition == msg.partition()
                out[msg.partition()].append(event)
                seen.add(event.lsn)
    finally:
        consumer.close()
    return out


def test_lsns_follow_commit_order_across_rotation_and_restarts(own_zone_a, test_cfg, meta):
    """S000-52"""
    inst, cluster, started, log = own_zone_a
    with inst.connect("zonesync_app").cursor() as cur:  # before capture starts: not published
        cur.execute("INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, 'c', 1, 1)", (CLOCK,))
    started.append(replicator_process.spawn(cluster, "a", log))
    _wait(lambda: latest_checkpoint(meta, "a"), "the replicator took its start position")
    phases = [range(n * PER_PHASE, (n + 1) * PER_PHASE) for n in range(PHASES)]

    _commit(inst, phases[0])
    with inst.connect().cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")  # a real rotation: phase 1 goes to the next file
        cur.execute("SHOW MASTER STATUS")
        rotated = cur.fetchone()[0]
    # the replicator read phase 0 and checkpointed past it, into the new file
    _wait(lambda: latest_checkpoint(meta, "a").log_file == rotated, "the checkpoint followed the rotation")
    published = topics.published(cluster, "a")
    _commit(inst, phases[1])
    # kill -9 as soon as the topic holds part of phase 1: its checkpoint is most likely not
    # saved yet, so the restart publishes some of it again
    _wait(lambda: topics.published(cluster, "a") > published, "the replicator published phase 1", step=0.002)
    replicator_process.kill(started[-1])
    _commit(inst, phases[2])  # while no replicator runs
    started.append(replicator_process.spawn(cluster, "a", log))
    _commit(inst, phases[3])  # while it catches up
    assert procs.stop(test_cfg.run_dir, inst.name), "the zone's mariadbd was running"  # a clean shutdown
    mariadb.start(inst, test_cfg.run_dir, test_cfg.log_dir, test_cfg.data_dir)
    _commit(inst, phases[4])  # the same replicator process, reconnected

    total = PHASES * PER_PHASE
    by_partition = _read_topic(cluster, total * (ROWS + 1))
    replicator_process.stop(started[-1])

    # every change, once; a re-published copy is its first copy again, marked as a retry
    copies: dict[int, list] = {}
    for events in by_partition.values():
        for e in events:
            copies.setdefault(e.lsn, []).append(e)
    for lsn, same in copies.items():
        first = same[0]
        for again in same[1:]:
            assert again.is_retry, f"LSN {lsn} published again without is_retry"
            assert msgspec.structs.replace(again, is_retry=False) == msgspec.structs.replace(first, is_retry=False)
    events = sorted((same[0] for same in copies.values()), key=lambda e: e.lsn)
    txn_of = [int(e.new["name"][1:]) for e in events]
    again = {t for e, t in zip(events, txn_of, strict=True) if len(copies[e.lsn]) > 1}
    assert not again & set(phases[0]), "the restarted replicator resumed after the checkpoint past phase 0"
    assert sorted(txn_of) == sorted(t for t in range(total) for _ in range(ROWS + 1)), "every change once"

    # across partitions: LSN order is commit order (and GTID order, and commit times never go back)
    assert txn_of == sorted(txn_of), "sorted by LSN, the transactions are in commit order"
    gtid_seq = [int(e.txn_id.rsplit("-", 1)[1]) for e in events]
    assert gtid_seq == sorted(gtid_seq) and len(set(gtid_seq)) == total, "LSN order is the binlog's GTID order"
    assert [e.commit_ts for e in events] == sorted(e.commit_ts for e in events)
    for t in range(total):
        rows = [e for e in events if int(e.new["name"][1:]) == t]
        assert [e.row_index for e in rows] == list(range(ROWS + 1)) and {e.row_count for e in rows} == {ROWS + 1}
        assert [e.op for e in rows] == ["insert"] * ROWS + ["update"], "within a transaction, the row order"
    clock = [e for e in events if e.pk == {"tenant_id": CLOCK}]
    assert [e.version for e in clock] == list(range(2, total + 2)), "one row's changes, in commit order"

    # per partition: first copies in increasing LSN order, each chained to the one before it
    for partition, arrived in by_partition.items():
        seen: set[int] = set()
        prev = 0
        for e in arrived:
            if e.lsn in seen:
                continue
            seen.add(e.lsn)
            assert e.lsn > prev, f"partition {partition}: LSN {e.lsn} arrived after {prev}"
            assert e.prev_lsn == prev, f"partition {partition}: the chain breaks at LSN {e.lsn}"
            prev = e.lsn
    assert all(by_partition.values()), "every partition carried changes"

    # the LSNs' file numbers: a step at the rotation, another at the server restart
    files = {t: split_lsn(e.lsn)[0] for e, t in zip(events, txn_of, strict=True)}
    last, first = PER_PHASE - 1, PER_PHASE
    assert files[first] == files[last] + 1, "FLUSH BINARY LOGS: the next transaction's LSN is in the next file"
    before_restart, after_restart = 4 * PER_PHASE - 1, 4 * PER_PHASE
    assert files[after_restart] > files[before_restart], "a restarted server writes a new file"
    assert len(set(files.values())) >= 3
    cp = latest_checkpoint(meta, "a")
    assert file_number(cp.log_file) >= files[after_restart], "the checkpoint followed into the new file"
