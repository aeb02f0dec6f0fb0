"""Seed S002-11 (大事务如何更好地支持): a transaction too large to hold is counted, then read
again and published a rows event at a time. Its events still carry the transaction's
row count and every row index once, the replicator never holds more than
`large_txn_rows` rows, and the target ends with exactly the source's rows."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.replication import checksum, latest_checkpoint
from zonesync.events import decode_message

pytestmark = pytest.mark.integration

ROWS = 3000
LIMIT = 500


def _published(cluster, expected: int, timeout: float = 30) -> list:
    """Every event on zone a's topic (first publications and resends alike)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "large-txn-test"})
    consumer.assign([TopicPartition(cluster.topic("a"), p, 0) for p in range(cluster.partitions)])
    events: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(events) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                events += decode_message(msg.value())
    finally:
        consumer.close()
    return events


def test_a_transaction_past_the_limit_is_streamed_with_its_row_count(zone_a_alone, zones, meta):
    conn, cluster = zone_a_alone
    replicator = cluster.make_replicator("a")
    replicator.large_txn_rows = LIMIT
    cluster.replicators["a"] = replicator
    cluster._run("replicator-a", replicator)
    cluster.wait_started()
    cluster.start(which=("applier",), zones=("b",))
    conn.autocommit(False)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
            "SELECT seq, CONCAT('t', seq), 1, 1 FROM zonesync_app.seq_1_to_3000"
        )
        conn.commit()
        cur.execute("UPDATE zonesync_app.tenants SET name = CONCAT(name, '-2'), _zs_version = 2")
        conn.commit()
        cur.execute(
            "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (9999, 'small', 1, 1)"
        )
        conn.commit()
    conn.autocommit(True)

    deadline = time.monotonic() + 60
    while checksum(zones["b"]) != checksum(zones["a"]):
        assert time.monotonic() < deadline, "zone b did not converge"
        time.sleep(0.2)
    assert len(checksum(zones["b"])) == ROWS + 1

    assert replicator.peak_buffered_rows <= LIMIT, "a large transaction was held whole"
    events = _published(cluster, 2 * ROWS + 1)
    by_txn: dict[str, list] = {}
    for e in events:
        by_txn.setdefault(e.txn_id, []).append(e)
    sizes = sorted(len(v) for v in by_txn.values())
    assert sizes == [1, ROWS, ROWS], "each large transaction published once, whole"
    for txn_events in by_txn.values():
        assert {e.row_count for e in txn_events} == {len(txn_events)}
        assert sorted(e.row_index for e in txn_events) == list(range(len(txn_events)))
        assert not any(e.is_retry for e in txn_events), "nothing of them went out before the second read"
    updates = next(v for v in by_txn.values() if v[0].op == "update")
    assert {e.new["name"] for e in updates} == {f"t{n}-2" for n in range(1, ROWS + 1)}

    # the checkpoint is saved once the broker acked its events, a moment after b converged
    deadline = time.monotonic() + 15
    while (cp := latest_checkpoint(meta, "a")).published_hwm < max(e.lsn for e in events):
        assert time.monotonic() < deadline, f"the checkpoint stays at {cp}"
        time.sleep(0.1)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()[:2]
    assert (cp.log_file, cp.log_pos) <= tuple(end)
    assert cp.published_hwm == max(e.lsn for e in events)
