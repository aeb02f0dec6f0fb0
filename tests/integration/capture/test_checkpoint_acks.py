"""The replicator's checkpoint and the broker's acks (S002-03, S001-04, S001-03): a
checkpoint never passes an event the broker has not acked; a replicator stopped with
acked-but-uncheckpointed events resumes from its checkpoint, not from the start, re-publishes
exactly those events with the same LSNs, and the applier applies nothing twice."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.background import wait_until
from tests.support.binlog import position
from tests.support.held_acks import AckGate
from tests.support.replication import insert_tenants, latest_checkpoint
from zonesync.events import decode_message, file_number

pytestmark = pytest.mark.integration


def _at(pos) -> tuple[int, int]:
    return file_number(pos[0]), int(pos[1])


def _cp_pos(meta) -> tuple[int, int]:
    cp = latest_checkpoint(meta, "a")
    assert cp is not None
    return _at((cp.log_file, cp.log_pos))


def _b_tenants(zones) -> tuple:
    with zones["b"].connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*), COUNT(DISTINCT tenant_id), COALESCE(SUM(_zs_version), 0) FROM tenants")
        return tuple(int(v) for v in cur.fetchone())


def _expect(first: int, last: int) -> tuple:
    n = last - first + 1
    return n, n, sum(t + 1 for t in range(first, last + 1))


def _topic_events(cluster, expected: int, timeout: float = 20) -> list:
    """Every event on zone a's topic, in offset order per partition."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "checkpoint-acks-test"})
    consumer.assign([TopicPartition(cluster.topic("a"), p, 0) for p in range(cluster.partitions)])
    events: list = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(events) >= expected:
                    break  # nothing more arriving
                continue
            if msg.error():
                continue
            events += decode_message(msg.value())
    finally:
        consumer.close()
    return events


def _first_batch(conn, cluster, zones, meta) -> tuple[int, int]:
    """Replicator a and applier b running, tenants 1..20 through and checkpointed: the
    position the checkpoint reached before the next writes."""
    cluster.start(which=("replicator",), zones=("a",))
    cluster.wait_started()
    cluster.start(which=("applier",), zones=("b",))
    insert_tenants(conn, 1, 20)
    p1 = _at(position(conn))
    wait_until(lambda: _b_tenants(zones) == _expect(1, 20), 15, "zone b has tenants 1..20")
    wait_until(lambda: _cp_pos(meta) >= p1, 10, "the checkpoint covers tenants 1..20")
    return p1


def test_the_checkpoint_never_passes_events_the_broker_has_not_acked(zone_a_alone, zones, meta, monkeypatch):
    """S002-03 / S001-04: with the broker's acks held back, zone a's checkpoint stays before
    the rows written meanwhile, however long the replicator reads on; once the acks arrive
    it advances past them, and zone b has every row exactly once."""
    conn, cluster = zone_a_alone
    gate = AckGate().install(monkeypatch)
    _first_batch(conn, cluster, zones, meta)
    replicator = cluster.replicators["a"]

    gate.hold.set()
    before = _at(position(conn))
    held_cp = _cp_pos(meta)
    insert_tenants(conn, 21, 20)
    after = _at(position(conn))
    wait_until(lambda: replicator.published >= 40, 10, "replicator a published tenants 21..40")
    wait_until(lambda: gate.held_total > 0, 10, "the broker's acks of tenants 21..40 are held")
    # Read on for a while (many checkpoint intervals and idle heartbeats): never past `before`.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        now = _cp_pos(meta)
        assert now <= before, f"checkpoint {now} passed unacked events (written after {before})"
        time.sleep(0.05)
    assert _cp_pos(meta) >= held_cp

    gate.hold.clear()
    wait_until(lambda: _cp_pos(meta) >= after, 10, "the checkpoint advances once the broker acked")
    wait_until(lambda: _b_tenants(zones) == _expect(1, 40), 15, "zone b has tenants 1..40")
    time.sleep(0.5)
    assert _b_tenants(zones) == _expect(1, 40), "every row exactly once"


def _restart_with_acked_uncheckpointed(conn, cluster, zones, meta, monkeypatch):
    """Tenants 1..20 checkpointed; tenants 21..40 published and stored by the broker, but the
    replicator stops before it learns of the acks (as if killed before saving the checkpoint);
    a new replicator of zone a then runs. Returns (events on the topic, checkpoint position
    at the stop, applier b)."""
    gate = AckGate().install(monkeypatch)
    _first_batch(conn, cluster, zones, meta)
    replicator = cluster.replicators["a"]
    gate.hold.set()
    insert_tenants(conn, 21, 20)
    after = _at(position(conn))
    wait_until(lambda: replicator.published >= 40, 10, "replicator a published tenants 21..40")
    wait_until(lambda: _b_tenants(zones) == _expect(1, 40), 15, "zone b got tenants 21..40 from the broker")
    cluster.stop("replicator-a")
    stopped_at = _cp_pos(meta)
    assert stopped_at < after, "the stopped replicator never learnt of the acks: its checkpoint is before 21..40"
    gate.hold.clear()
    cluster.start(which=("replicator",), zones=("a",))
    wait_until(lambda: _cp_pos(meta) >= after, 15, "the new replicator's checkpoint passes tenants 21..40")
    events = _topic_events(cluster, 60)
    return events, stopped_at, cluster.appliers["b"]


def test_a_restarted_replicator_resumes_from_its_checkpoint_not_from_the_start(zone_a_alone, zones, meta, monkeypatch):
    """S001-03 / S001-04: only the events after the saved checkpoint are published again,
    with the LSNs they had; none before it; applier b skips the copies (applies 40 rows)."""
    conn, cluster = zone_a_alone
    events, _, applier = _restart_with_acked_uncheckpointed(conn, cluster, zones, meta, monkeypatch)
    by_tenant: dict[int, list] = {}
    for e in events:
        by_tenant.setdefault(e.pk["tenant_id"], []).append(e)
    assert sorted(by_tenant) == list(range(1, 41))
    once = [t for t, es in by_tenant.items() if len(es) == 1]
    twice = [t for t, es in by_tenant.items() if len(es) == 2]
    assert sorted(once) == list(range(1, 21)), "nothing before the checkpoint is published again"
    assert sorted(twice) == list(range(21, 41)), "everything after it is published again, once"
    for t in twice:
        first, again = by_tenant[t]
        assert (again.lsn, again.prev_lsn, again.partition) == (first.lsn, first.prev_lsn, first.partition)
    time.sleep(1.0)
    assert _b_tenants(zones) == _expect(1, 40)
    assert applier.applied == 40, f"applier b applied {applier.applied} events for 40 rows: a copy was applied"


def test_events_published_again_after_a_restart_carry_is_retry(zone_a_alone, zones, meta, monkeypatch):
    """S001-03 / S001-04 (docs: is_retry = re-published after a restart): exactly the events
    between the saved checkpoint and the stop come again with is_retry=True."""
    conn, cluster = zone_a_alone
    events, _, _ = _restart_with_acked_uncheckpointed(conn, cluster, zones, meta, monkeypatch)
    retried = sorted(e.pk["tenant_id"] for e in events if e.is_retry)
    assert retried == list(range(21, 41)), f"events with is_retry: tenants {retried}"
