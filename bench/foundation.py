"""Foundation benchmarks: is the dev broker fast enough to carry replication?

- dev broker produce+consume of 100k 300-byte keyed messages (lz4, idempotent, one
  Python producer and consumer) vs the same rows inserted into a zone with 1000-row
  INSERTs. Replication's bulk target (issue 4) is 0.5x a zone's native apply rate, so
  the transport must carry at least that: target >= 0.5x.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.harness import BenchEnv, Row
from zonesync.dev import broker

N = 100_000
PAYLOAD = "x" * 300
PARTITIONS = 8


def _broker_rows_per_s(env: BenchEnv) -> float:
    info = broker.read_info(env.cfg.broker_file)
    topic = f"bench.{uuid.uuid4().hex[:8]}"
    broker.create_topic(env.cfg.broker_file, topic, PARTITIONS)
    producer = Producer(
        {
            "bootstrap.servers": info["bootstrap"],
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    consumer = Consumer({"bootstrap.servers": info["bootstrap"], "group.id": topic, "auto.offset.reset": "earliest"})
    # Partitions assigned, as appliers do (positions live with the data): a group join takes
    # the mock ~3 s, and with subscribe() that wait fell inside the timed run.
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    started = time.perf_counter()
    for i in range(N):
        while True:
            try:
                producer.produce(topic, key=str(i % 1000), value=PAYLOAD)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)
    got = 0
    while got < N and time.perf_counter() - started < 120:
        msgs = consumer.consume(10_000, 0.5)
        got += sum(1 for m in msgs if not m.error())
    elapsed = time.perf_counter() - started
    consumer.close()
    return got / elapsed


def _zone_insert_rows_per_s(env: BenchEnv) -> float:
    conn = env.instances["a"].connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_rows (id BIGINT PRIMARY KEY, k INT, v VARCHAR(400))")
        cur.execute("TRUNCATE bench_rows")
        started = time.perf_counter()
        for lo in range(0, N, 1000):
            cur.executemany(
                "INSERT INTO bench_rows (id, k, v) VALUES (%s, %s, %s)",
                [(i, i % 1000, PAYLOAD) for i in range(lo, lo + 1000)],
            )
        elapsed = time.perf_counter() - started
    conn.close()
    return N / elapsed


def run(env: BenchEnv) -> list[Row]:
    return [
        Row(
            "dev broker: 100k keyed msgs produce+consume",
            _broker_rows_per_s(env),
            _zone_insert_rows_per_s(env),
            "r/s",
            0.5,
            "100k rows into a zone, 1000-row INSERTs",
        )
    ]
