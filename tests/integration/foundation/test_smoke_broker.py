"""The dev broker speaks real Kafka: keyed produce/consume across 8 partitions."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from zonesync.dev import broker as broker_mod

pytestmark = pytest.mark.integration


def test_keyed_round_trip_on_eight_partitions(broker, test_cfg):
    topic = f"smoke.{uuid.uuid4().hex[:8]}"
    broker_mod.create_topic(test_cfg.broker_file, topic, 8)
    producer = Producer(
        {"bootstrap.servers": broker["bootstrap"], "enable.idempotence": True, "compression.type": "lz4"}
    )
    sent = [(f"key-{i % 20}", f"{i}") for i in range(400)]
    for key, value in sent:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(15) == 0, "the broker did not ack every message"
    meta = producer.list_topics(topic, timeout=5)
    assert len(meta.topics[topic].partitions) == 8

    consumer = Consumer(
        {
            "bootstrap.servers": broker["bootstrap"],
            "group.id": f"smoke-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[int, str, str]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.partition(), msg.key().decode(), msg.value().decode()))
    finally:
        consumer.close()

    assert sorted(v for _, _, v in got) == sorted(v for _, v in sent)
    partitions_of_key: dict[str, set[int]] = {}
    for partition, key, _ in got:
        partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_of_key.values()), "a key must map to one partition"
    assert len({p for p, _, _ in got}) >= 4, "20 keys should spread over most of the 8 partitions"
    for key in partitions_of_key:  # per-key order holds
        values = [int(v) for _, k, v in got if k == key]
        assert values == sorted(values)


def test_topic_creation_is_idempotent_and_refuses_conflicts(broker, test_cfg):
    topic = f"smoke.{uuid.uuid4().hex[:8]}"
    broker_mod.create_topic(test_cfg.broker_file, topic, 3)
    broker_mod.create_topic(test_cfg.broker_file, topic, 3)
    with pytest.raises(broker_mod.BrokerError, match="exists with 3 partitions"):
        broker_mod.create_topic(test_cfg.broker_file, topic, 5)
    with pytest.raises(broker_mod.BrokerError, match="invalid"):
        broker_mod.create_topic(test_cfg.broker_file, "bad/topic", 1)
