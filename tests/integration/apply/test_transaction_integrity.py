"""Seed S002-02 (事务完整性: Replayer 在回放的时候检查日志是否收集了 TotalNum 条数的日志): a
transaction's rows in one partition are applied together or not at all. While the last
of them (txn_end) has not arrived, none of them is applied; an applier restarted in the
meantime still applies none, reads again the message the cut fell in, and asks for no
resend."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition

from tests.support.relay import Relay
from tests.support.replication import Cluster, reset_state
from zonesync.dev import broker as broker_mod
from zonesync.events import decode_message, encode_message

pytestmark = pytest.mark.integration

FIRST, SECOND = 5, 20  # rows of the two transactions


class HoldingRelay(Relay):
    """Zone a's topic -> a twin topic for zone b's applier. The first two transactions go
    out as one message holding all of the first and all but the last row of the second
    (a cut inside a message), then the second's last row waits `hold` seconds; everything
    after, one event per message."""

    name = "holding-relay"

    def __init__(self, bootstrap, source: str, twin: str, hold: float):
        super().__init__(bootstrap)
        self.source, self.twin, self.hold = source, twin, hold
        self.holding = threading.Event()
        self.released = threading.Event()
        self._seen: list = []
        self._txns: list[str] = []

    def _assignment(self) -> list[TopicPartition]:
        return [TopicPartition(self.source, 0, 0)]

    def _relay(self, msg, producer) -> None:
        seen, txns = self._seen, self._txns
        for event in decode_message(msg.value()):
            if self.released.is_set():
                producer.produce(self.twin, value=encode_message([event]), partition=0)
                continue
            if event.txn_id not in txns:
                txns.append(event.txn_id)
            seen.append(event)
            if len(txns) == 2 and event.txn_end:  # the second transaction's last row
                assert seen[-1] is event and len(seen) == FIRST + SECOND
                producer.produce(self.twin, value=encode_message(seen[:-1]), partition=0)
                producer.flush(5)
                self.holding.set()
                self._stop.wait(self.hold)
                producer.produce(self.twin, value=encode_message([event]), partition=0)
                self.released.set()


def _count(inst, lo: int, hi: int) -> int:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM tenants WHERE tenant_id BETWEEN %s AND %s", (lo, hi))
        return cur.fetchone()[0]


def _requests(meta) -> int:
    return meta.run("SELECT COUNT(*) FROM resend_requests")[0][0][0]


def test_a_partitions_rows_of_a_transaction_wait_for_its_last_row(meta, zones, broker, test_cfg):
    reset_state(zones, meta)
    twins = {}
    cluster = Cluster(
        zones, meta, broker, test_cfg.broker_file, partitions=1, relay_topic_of=lambda z: twins.get(z, cluster.topic(z))
    )
    twins["a"] = f"{cluster.prefix}.held.a"
    broker_mod.create_topic(test_cfg.broker_file, twins["a"], 1)
    relay = HoldingRelay(cluster.bootstrap, cluster.topic("a"), twins["a"], hold=4.0).start()
    conn = zones["a"].connect()
    try:
        cluster.start(which=("replicator",), zones=("a",))
        cluster.start(which=("applier",), zones=("b",))
        cluster.wait_started()
        with conn.cursor() as cur:
            for lo, n in ((1, FIRST), (101, SECOND)):
                cur.execute(
                    "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
                    f"SELECT seq, 'x', 1, 1 FROM zonesync_app.seq_{lo}_to_{lo + n - 1}"
                )
                conn.commit()
        assert relay.holding.wait(15), "the relay never saw both transactions"
        deadline = time.monotonic() + 10
        while _count(zones["b"], 1, FIRST) < FIRST:
            assert time.monotonic() < deadline, "the first transaction, whole in the message, was not applied"
            time.sleep(0.05)
        seen_partial = 0
        restarted = False
        while not relay.released.is_set():
            seen_partial = max(seen_partial, _count(zones["b"], 101, 100 + SECOND))
            if not restarted:  # the applier restarts while the rows wait
                cluster.stop("applier-b")
                cluster.start(which=("applier",), zones=("b",))
                restarted = True
            time.sleep(0.05)
        assert seen_partial == 0, "rows of a transaction were applied before its last row arrived"
        deadline = time.monotonic() + 10
        while _count(zones["b"], 101, 100 + SECOND) < SECOND:
            assert time.monotonic() < deadline, "the transaction was not applied once its last row arrived"
            time.sleep(0.05)
        assert _count(zones["b"], 1, FIRST) == FIRST
        assert _requests(meta) == 0, "the restart read the cut message again: no gap, no resend"
    finally:
        relay.stop()
        cluster.stop()
        conn.close()
        reset_state(zones, meta)
