"""Duplicated, reordered and dropped messages between broker and applier; an unrepairable gap."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.fault_relay import FaultRelay
from tests.support.replication import Cluster, checksum, reset_state, settled_reconciliation
from zonesync.apply.tools.reconcile import OK
from zonesync.dev import broker as broker_mod

pytestmark = pytest.mark.integration


@pytest.fixture
def faulty(meta, zones, broker, test_cfg, guard_env):
    """Zone a's changes reach zone b only through a FaultRelay (c reads them directly)."""
    reset_state(zones, meta)
    made: dict[str, object] = {}

    def build(faults: dict[int, str], **applier_kw):
        relay_of = {}
        cluster = Cluster(
            zones,
            meta,
            broker,
            test_cfg.broker_file,
            partitions=1,
            relay_topic_of=lambda z: relay_of.get(z, cluster.topic(z)),
        )
        relay_topic = f"{cluster.prefix}.relay.a"
        broker_mod.create_topic(test_cfg.broker_file, relay_topic, 1)
        relay = FaultRelay(cluster.bootstrap, {cluster.topic("a"): relay_topic}, 1, faults).start()
        relay_of["a"] = relay_topic
        cluster.start(which=("replicator",))
        cluster.start(which=("applier",), zones=("b",), **applier_kw)
        cluster.wait_started()
        made.update(cluster=cluster, relay=relay)
        return cluster, relay

    yield build
    if made:
        made["relay"].stop()
        made["cluster"].stop()


def _write(guard, n, start=0):
    for i in range(start, start + n):
        with guard.transaction() as tx:
            tx.insert("tenants", {"tenant_id": i, "name": f"r{i}"})


def _write_past_the_fault(guard, relay, after: int = 3, timeout: float = 20) -> int:
    """Rows 0, 1, ... one transaction each, until the relay has injected its fault, then
    `after` more (so that a message follows the damaged one); returns how many. A message
    carries whatever the replicator read in one go: one row or several, so which row the
    n-th message holds is not fixed."""
    n = 0
    deadline = time.monotonic() + timeout
    while not relay.injected and time.monotonic() < deadline:
        _write(guard, 1, n)
        n += 1
        time.sleep(0.05)
    assert relay.injected, "the relay never reached the message it was to damage"
    _write(guard, after, n)
    return n + after


def _wait_halted(zones, timeout: float = 30):
    """zone b's (status, detail) of zone a's partition once halted (or as it is at the timeout)."""
    deadline = time.monotonic() + timeout
    row = None
    while time.monotonic() < deadline:
        with zones["b"].connect().cursor() as cur:
            cur.execute("SELECT status, detail FROM zonesync.apply_state WHERE source_zone = 'a'")
            row = cur.fetchone()
        if row and row[0] == "halted":
            break
        time.sleep(0.1)
    return row


def _first_lost(relay) -> int:
    """The first tenant id whose event the relay dropped for good. Rows are written one
    per transaction in id order, and a message carries one or more of them: the third
    message starts at id 2 or later."""
    first = min(e.pk["tenant_id"] for e in relay.dropped)
    assert first >= 2, relay.dropped
    return first


def _resend_requests(meta):
    with meta.connect().cursor() as cur:
        cur.execute("SELECT partition_no, from_lsn, status FROM resend_requests WHERE target_zone = 'b'")
        return cur.fetchall()


@pytest.mark.parametrize("kind", ["drop", "reorder"])
def test_gap_is_detected_and_repaired_by_a_resend(faulty, guard_env, zones, meta, kind):
    cluster, relay = faulty({4: kind})
    n = _write_past_the_fault(guard_env("a"), relay)
    deadline = time.monotonic() + 30
    while len(checksum(zones["b"])) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert relay.injected == [(kind, 4)]
    assert checksum(zones["b"]) == checksum(zones["a"])
    requests = _resend_requests(meta)
    assert requests and requests[0][2] == "done", requests
    _counts_agree(meta, zones)  # the resent events were counted once, at both ends (S002-10)


def test_duplicate_is_skipped_without_a_resend(faulty, guard_env, zones, meta):
    cluster, relay = faulty({3: "duplicate"})
    n = _write_past_the_fault(guard_env("a"), relay)
    deadline = time.monotonic() + 20
    while len(checksum(zones["b"])) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert relay.injected == [("duplicate", 3)]
    assert checksum(zones["b"]) == checksum(zones["a"])
    assert _resend_requests(meta) == ()
    assert cluster.appliers["b"].applied == n
    _counts_agree(meta, zones)  # the duplicate was not counted (S002-10)


def _counts_agree(meta, zones) -> None:
    rows = settled_reconciliation(meta, zones, "b", ["a"])
    assert rows and all(r.status == OK for r in rows), rows


def test_unrepairable_gap_halts_the_partition_and_alerts(faulty, guard_env, zones, meta):
    cluster, relay = faulty({3: "drop_always"}, resend_timeout=0.3, max_resends=2)
    _write_past_the_fault(guard_env("a"), relay)
    row = _wait_halted(zones)
    assert row and row[0] == "halted", row
    assert "not repaired by 2 resends" in row[1]
    assert len([r for r in _resend_requests(meta) if r[2] == "done"]) == 2, "both resends were served"
    with meta.connect().cursor() as cur:
        cur.execute("SELECT detail FROM alerts WHERE zone = 'b' AND kind = 'partition_halted'")
        alert = cur.fetchone()
    assert alert, "halting must raise an alert"
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT partition_no, applied_lsn FROM zonesync.apply_state WHERE status = 'halted'")
        ((partition, applied),) = cur.fetchall()
    detail = json.loads(alert[0])  # S000-57: the alert says which stream stopped, and where
    assert (detail["source"], detail["partition"], detail["applied_lsn"]) == ("a", partition, applied)
    assert "not repaired by 2 resends" in detail["detail"]
    rows_b = checksum(zones["b"])
    assert [r[0] for r in rows_b] == list(range(_first_lost(relay))), "nothing after the gap may be applied"
    # the halt survives a restart of the applier
    cluster.stop("applier-b")
    cluster.start(which=("applier",), zones=("b",))
    time.sleep(1.0)
    assert checksum(zones["b"]) == rows_b


def test_refused_resend_halts_at_once(faulty, guard_env, zones, meta):
    """A resend the replicator cannot serve (its checkpoint history no longer reaches
    back: "needs full copy") halts the partition at once, however many resends are left."""
    cluster, relay = faulty({3: "drop_always"}, resend_timeout=0.3, max_resends=50)
    _write_past_the_fault(guard_env("a"), relay)
    deadline = time.monotonic() + 20
    while not _resend_requests(meta) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _resend_requests(meta), "the gap must be noticed"
    # The history is lost (pruned, a restored meta store): only the newest checkpoint
    # is left, and it is past the gap.
    cluster.stop("replicator-a")
    with meta.connect().cursor() as cur:
        cur.execute(
            "DELETE FROM replicator_checkpoints WHERE zone = 'a' AND lsn < "
            "(SELECT m FROM (SELECT MAX(lsn) m FROM replicator_checkpoints WHERE zone = 'a') x)"
        )
    cluster.start(which=("replicator",))
    row = _wait_halted(zones)
    assert row and row[0] == "halted", row
    assert "impossible" in row[1] and "full copy" in row[1], row[1]
    served = [r for r in _resend_requests(meta) if r[2] == "done"]
    assert len(served) < 50, "halted because the resend was refused, not because resends ran out"
    assert [r for r in _resend_requests(meta) if r[2] == "failed"], "the refusal is recorded on the request"
    assert [r[0] for r in checksum(zones["b"])] == list(range(_first_lost(relay))), "nothing after the gap"
