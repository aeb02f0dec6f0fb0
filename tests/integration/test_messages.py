"""The replicator's Kafka messages: a burst of transactions travels as few messages,
each holding one partition's events in LSN order, chained by prev_lsn across messages."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.replication import Cluster, reset_state
from zonesync.capture.event import decode_message

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
                assert e.partition == partition
                assert e.prev_lsn == prev, "each event follows the one before it in its partition"
                assert e.lsn > prev
                prev = e.lsn
