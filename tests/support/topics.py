"""Reading a test Cluster's change topics back from the broker: what a zone's replicator
published, to its end, in offset order per partition."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from zonesync.events import decode_message


def _consumer(cluster) -> Consumer:
    """A consumer that only reads assigned partitions (its group is its own, nothing committed)."""
    group = f"test-read-{uuid.uuid4().hex[:8]}"
    return Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "enable.auto.commit": False})


def high_watermarks(consumer, topic: str, partitions: int, timeout: float = 5) -> list[int]:
    """Each partition's end offset, asked of the broker (not the consumer's cache)."""
    return [
        consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)[1]
        for p in range(partitions)
    ]


def published(cluster, zone: str, consumer=None) -> int:
    """How many messages the zone's topic holds, over all partitions (through `consumer`
    when given: a test polling this in a tight loop keeps one open)."""
    own = consumer is None
    consumer = _consumer(cluster) if own else consumer
    try:
        return sum(high_watermarks(consumer, cluster.topic(zone), cluster.partitions))
    finally:
        if own:
            consumer.close()


def topic_messages(cluster, zone: str, timeout: float = 30) -> list[tuple[int, bytes]]:
    """(partition, value) of every message on the zone's topic up to each partition's end
    as it stood when called, in offset order per partition; fails at the timeout."""
    topic = cluster.topic(zone)
    consumer = _consumer(cluster)
    try:
        ends = high_watermarks(consumer, topic, cluster.partitions)
        left = {p for p, end in enumerate(ends) if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(left)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while left:
            assert time.monotonic() < deadline, f"topic {topic}: partitions {sorted(left)} not read to their end {ends}"
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out.append((msg.partition(), msg.value()))
            if msg.offset() >= ends[msg.partition()] - 1:
                left.discard(msg.partition())
        return out
    finally:
        consumer.close()


def topic_events(cluster, zone: str, timeout: float = 30) -> dict[int, list]:
    """partition -> every event on the zone's topic there, in offset order (every partition
    of the cluster present, an empty one with [])."""
    out: dict[int, list] = {p: [] for p in range(cluster.partitions)}
    for partition, value in topic_messages(cluster, zone, timeout):
        out[partition] += decode_message(value)
    return out


def copies_by_lsn(cluster, zone: str, timeout: float = 30) -> dict[int, list]:
    """LSN -> every copy of that event on the zone's topic (a re-published one after its
    first), in offset order."""
    copies: dict[int, list] = {}
    for _partition, value in topic_messages(cluster, zone, timeout):
        for event in decode_message(value):
            copies.setdefault(event.lsn, []).append(event)
    return copies
