"""Faults in the applier's target transactions, for the crash and rollback tests (seeds
S003-07, S002-17, S003-08, S003-09).

- `spawn` runs a zone's applier in a process of its own (like applier_process, but
  one applier taking every partition, as `zonesync apply` and `dev up` run it, or a
  group member with `group=True`; its worker count and small-round size chosen by the
  test), so that a test can kill -9 it (replicator_process.kill) and start another:
      python -m tests.support.apply_faults SPEC
- `RowLock` holds a target row FOR UPDATE from a test connection, so the batch that
  writes it waits mid-transaction; `waiting_on` names the connections waiting for it.
- `group_offsets` / `commit_group_offsets`: the Kafka consumer group's committed
  offsets (which the applier must neither write nor follow).
- `keys_of_partition`: tenant ids whose rows hash to one partition (one target
  transaction carries a partition's share of a round).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from zonesync.events import partition_of

REPO = Path(__file__).resolve().parents[2]


def spawn(
    cluster,
    zone: str,
    log_path: Path,
    group: bool = False,
    workers: int = 2,
    small_round: int = 200,
    max_batch: int = 2000,
) -> subprocess.Popen:
    """The applier of `zone` for `cluster` in a child process (sources: the other zones)."""
    spec = {
        "zone": zone,
        "port": cluster.zones[zone].port,
        "meta": dataclasses.asdict(cluster.meta),
        "broker_file": str(cluster.broker_file),
        "prefix": cluster.prefix,
        "partitions": cluster.partitions,
        "group": group,
        "workers": workers,
        "small_round": small_round,
        "max_batch": max_batch,
    }
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.apply_faults", json.dumps(spec)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def main(spec: dict) -> None:
    from tests.support.replication import ZONES
    from zonesync.apply.batch.writer import ZoneWriter
    from zonesync.apply.loop.applier import Applier
    from zonesync.apply.loop.settings import ApplierSettings
    from zonesync.dev import broker as broker_mod
    from zonesync.meta.db import MetaConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(message)s")
    broker_file, prefix, port = Path(spec["broker_file"]), spec["prefix"], spec["port"]
    Applier(
        spec["zone"],
        [z for z in ZONES if z != spec["zone"]],
        lambda: ZoneWriter("127.0.0.1", port, "root", "", "zonesync_app"),
        MetaConfig(**spec["meta"]),
        partitions=spec["partitions"],
        bootstrap=lambda: broker_mod.read_info(broker_file)["bootstrap"],
        topic_of=lambda z: f"{prefix}.zonesync.{z}.changes",
        settings=ApplierSettings(
            workers=spec["workers"], small_round=spec["small_round"], max_batch=spec["max_batch"], group=spec["group"]
        ),
    ).run()


# -- row locks held by a test ---------------------------------------------------------

LOCK_WAITS = (
    "SELECT r.trx_mysql_thread_id, r.trx_id, b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w "
    "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
    "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id"
)


def waits_on(observer, thread_id: int) -> set[tuple[int, int]]:
    """(thread id, transaction id) of each transaction now waiting for a lock that
    connection `thread_id` holds. Poll it less often than every 0.1 s: the server serves
    its transaction and lock tables from a cache refreshed only after 0.1 s without a read."""
    with observer.cursor() as cur:
        cur.execute(LOCK_WAITS)
        return {(int(r), int(trx)) for r, trx, b in cur.fetchall() if int(b) == thread_id}


def waiting_on(observer, thread_id: int) -> set[int]:
    """The connections (thread ids) now waiting for a lock that connection `thread_id` holds."""
    return {r for r, _ in waits_on(observer, thread_id)}


def wait_for_waiters(observer, thread_id: int, timeout: float, what: str) -> set[int]:
    """The connections waiting for a lock that connection `thread_id` holds, once there are any."""
    deadline = time.monotonic() + timeout
    while True:
        found = waiting_on(observer, thread_id)
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting until {what}"
        time.sleep(0.25)  # the server refreshes its lock tables only after 0.1 s without a read


class RowLock:
    """A test's transaction in a zone holding rows of `table` FOR UPDATE until released:
    the applier's batch that writes one of them waits mid-transaction (its apply_state
    rows claimed, its new rows perhaps inserted) for as long as the test wants."""

    def __init__(self, inst, table: str, column: str, keys: list[int]):
        self.inst = inst
        self.conn = inst.connect("zonesync_app")
        self.conn.autocommit(False)
        self.observer = inst.connect()
        self.thread_id = self.conn.thread_id()
        with self.conn.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")  # never published, should it write
            marks = ", ".join(["%s"] * len(keys))
            cur.execute(f"SELECT * FROM {table} WHERE {column} IN ({marks}) FOR UPDATE", keys)

    def waiters(self) -> set[int]:
        return waiting_on(self.observer, self.thread_id)

    def waits(self) -> set[tuple[int, int]]:
        return waits_on(self.observer, self.thread_id)

    def execute(self, sql: str, args=None):
        """A statement in the holding transaction; its rows."""
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def wait_for_waiter(self, timeout: float, what: str = "a batch waits for the held row", besides=()) -> int:
        """The thread id of a connection waiting for this lock (other than `besides`), once
        there is one."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.waiters() - set(besides)
            if found:
                return min(found)
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting until {what}"
            time.sleep(0.25)  # see waits_on

    def release(self) -> None:
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
            self.conn = None
        if self.observer is not None:
            self.observer.close()
            self.observer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def connection_alive(observer, thread_id: int) -> bool:
    with observer.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", (thread_id,))
        return cur.fetchone()[0] > 0


# -- where the applier stands ----------------------------------------------------------


def positions(inst, source: str) -> dict[int, tuple[int, int, int, str]]:
    """partition -> (applied LSN, Kafka offset, events, status) of `source` in zone `inst`."""
    conn = inst.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT partition_no, applied_lsn, kafka_offset, events, status FROM zonesync.apply_state "
                "WHERE source_zone = %s",
                (source,),
            )
            return {int(p): (int(lsn), int(off), int(n), st) for p, lsn, off, n, st in cur.fetchall()}
    finally:
        conn.close()


def committed_events(inst, source: str) -> int:
    return sum(n for _, _, n, _ in positions(inst, source).values())


# -- the consumer group's offsets --------------------------------------------------------


def _group_consumer(bootstrap: str, group: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> the offset the group committed (negative: none)."""
    from confluent_kafka import TopicPartition

    consumer = _group_consumer(bootstrap, group)
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    consumer = _group_consumer(bootstrap, "zonesync-test-watermarks")
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def commit_group_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int], timeout: float = 30) -> None:
    """Commit `offsets` (partition -> offset) for the group as a member of it (the broker
    takes a group's commits from its members only): joins it, waits for the partitions
    (a killed member holds them until its session times out), commits, leaves."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    assigned: set[int] = set()
    try:
        consumer.subscribe([topic], on_assign=lambda _c, parts: assigned.update(tp.partition for tp in parts))
        deadline = time.monotonic() + timeout
        while not assigned >= set(offsets):
            assert time.monotonic() < deadline, f"the test's consumer was not given {topic}'s partitions in {group}"
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, p, off) for p, off in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def produce_raw(bootstrap: str, topic: str, partition: int, value: bytes) -> None:
    """One message as it is, into a partition of a change topic (a malformed one, say)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, value=value, partition=partition)
    assert producer.flush(10) == 0, f"the message to {topic}[{partition}] was not delivered"


# -- keys ------------------------------------------------------------------------------------


def keys_of_partition(partition: int, partitions: int, count: int, start: int = 1, table: str = "tenants") -> list:
    """The first `count` integer keys from `start` on whose rows of `table` hash to `partition`."""
    out, key = [], start
    while len(out) < count:
        if partition_of(table, f"[{key}]", partitions) == partition:
            out.append(key)
        key += 1
    return out


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
