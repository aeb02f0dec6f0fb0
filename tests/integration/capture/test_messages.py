"""The replicator's Kafka messages: a burst of transactions travels as few messages,
each holding one partition's events in LSN order, chained by prev_lsn across messages."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.replication import Cluster, reset_state, wait_converged
from zonesync.apply.tools.progress import STALE_AFTER_S, lag_report
from zonesync.events import decode_message, partition_of, pk_text

pytestmark = pytest.mark.integration

PARTITIONS = 4


def _read_all(cluster, expected: int, timeout: float = 30) -> dict[int, list[list]]:
    """partition -> the events of each message, in offset order."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "messages-test"})
    consumer.assign([TopicPartition(cluster.topic("a"), p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[list]] = {p: [] for p in range(PARTITIONS)}
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while got < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            events = decode_message(msg.value())
            out[msg.partition()].append(events)
            got += len(events)
    finally:
        consumer.close()
    return out


def test_a_burst_travels_as_few_messages_with_each_partitions_chain_whole(meta, zones, broker, test_cfg, guard_env):
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    # only the burst's end sends what is queued (the binlog has nothing more ready): the
    # other flush points, a checkpoint every 0.1 s and a 5 ms linger, cut a burst read
    # slowly (a loaded CI machine: 24 messages once) and are not what this test is about
    replicator = cluster.replicators["a"] = cluster.make_replicator("a")
    replicator.checkpoint_interval = replicator.max_linger = 30.0
    try:
        cluster.start(which=("replicator",), zones=("a",))
        cluster.wait_started()
        cluster.stop("replicator-a")
        guard = guard_env("a")
        for t in range(60):  # written while the replicator is down: read back as one burst
            with guard.transaction() as tx:
                for i in range(3):
                    tx.insert("tenants", {"tenant_id": t * 3 + i, "name": f"n{t}"})
        cluster.start(which=("replicator",), zones=("a",))
        messages = _read_all(cluster, 180)
    finally:
        cluster.stop()
    events = [e for p in messages.values() for m in p for e in m]
    assert sorted(e.pk["tenant_id"] for e in events) == list(range(180)), "every row once"
    count = sum(len(p) for p in messages.values())
    assert count <= 20, f"180 events of a burst took {count} messages: they were not batched"
    for partition, batches in messages.items():
        prev = 0
        for batch in batches:
            for e in batch:
                assert e.partition == partition == partition_of(e.table, pk_text(e.pk), PARTITIONS)
                assert e.prev_lsn == prev, "each event follows the one before it in its partition"
                assert e.lsn > prev
                prev = e.lsn


def test_lag_is_reported_per_partition_and_drops_to_zero_after_a_burst(cluster, guard_env, zones, meta):
    """Zone b's applier is down while zone a writes a burst (several events per message):
    `zonesync lag` marks a -> b stale (S003-02); once it caught up, every partition of
    a -> b reports its last LSN, nothing behind, and the pair is fresh again."""

    def pair():
        return next((r for r in lag_report(meta) if r[:2] == ("a", "b")), None)

    deadline = time.monotonic() + 10
    while pair() is None:  # the running applier's first report
        assert time.monotonic() < deadline, "zone b's applier never reported"
        time.sleep(0.2)
    assert not pair()[5]
    cluster.stop("applier-b")
    guard = guard_env("a")
    for t in range(40):
        with guard.transaction() as tx:
            tx.insert("tenants", {"tenant_id": t, "name": f"n{t}"})
    last = {p: batches[-1][-1].lsn for p, batches in _read_all(cluster, 40).items() if batches}
    assert len(last) > 1, "the burst spans several partitions"
    deadline = time.monotonic() + STALE_AFTER_S + 10
    while not pair()[5]:
        assert time.monotonic() < deadline, f"a stopped applier must show as stale: {pair()}"
        time.sleep(0.2)
    cluster.start(which=("applier",), zones=("b",))
    wait_converged(zones, ("tenants",))
    want = {p: (lsn, 0, 0.0) for p, lsn in last.items()}
    deadline = time.monotonic() + 10
    while True:
        rows, _ = meta.run(
            "SELECT partition_no, applied_lsn, behind_events, behind_seconds FROM apply_lag "
            "WHERE source_zone = 'a' AND target_zone = 'b'"
        )
        reported = {int(p): (int(lsn), int(ev), float(sec)) for p, lsn, ev, sec in rows}
        if {p: reported.get(p) for p in want} == want or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert {p: reported.get(p) for p in want} == want
    assert not pair()[5], "reporting again: no longer stale"
