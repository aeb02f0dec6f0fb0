"""S000-69: a zone's applier was down longer than the topic's retention, so the successor of
its applied LSN is no longer in the topic: the applier must notice the gap and never apply
from the oldest message left. It asks the source's replicator for a resend from the binlog;
while the binlog has it, the resend repairs the partition exactly; when it cannot be served
(the checkpoint history no longer reaches back, or the binlog file is purged) the partition
halts with an alert ("needs full copy") and nothing past the gap is applied, while the
source's other partitions, the other sources and the other zones go on.

test_stream_faults.py drops single messages between broker and applier while the applier
runs; here the applier is stopped, the topic's head expires while it is down (TailRelay: a
twin topic holding only the tail), and the applier comes back to a position that is gone.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.background import Background, wait_until
from tests.support.replication import Cluster, latest_checkpoint, reset_state
from tests.support.tail_relay import TailRelay
from zonesync.capture.checkpoints import CheckpointStore
from zonesync.dev import broker as broker_mod
from zonesync.events import partition_of

pytestmark = pytest.mark.integration

PARTITIONS = 2
EXPIRED, KEPT = 0, 1  # zone a's partition whose head expires, and one whose head is all kept


def _ids(zsids: range, partition: int) -> list[int]:
    """Tenant ids owned by a zone (ZSID = id mod 1024) that land in `partition`, in order."""
    return [i for i in zsids if partition_of("tenants", f"[{i}]", PARTITIONS) == partition]


A_IDS = {p: _ids(range(1, 400), p) for p in (EXPIRED, KEPT)}
C_IDS = list(range(801, 1000))
# rows per phase: applied before the applier stops, written while it is down, written once it is back
PHASES = {"applied": (0, 8), "down": (8, 14), "back": (14, 17)}


def _phase(ids: list[int], *phases: str) -> list[int]:
    return [i for ph in phases for i in ids[slice(*PHASES[ph])]]


def _write(guard_a, guard_c, phase: str) -> None:
    """Zone a's rows of a phase, both partitions interleaved, and zone c's: one transaction
    per row, a little apart, so that each is a message of its own."""
    for ia, ib, ic in zip(_phase(A_IDS[EXPIRED], phase), _phase(A_IDS[KEPT], phase), _phase(C_IDS, phase), strict=True):
        for guard, i in ((guard_a, ia), (guard_a, ib), (guard_c, ic)):
            with guard.transaction() as tx:
                tx.insert("tenants", {"tenant_id": i, "name": f"{phase}-{i}"})
        time.sleep(0.03)


def _tenant_ids(inst) -> set[int]:
    conn = inst.connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT tenant_id FROM tenants")
            return {r[0] for r in cur.fetchall()}
    finally:
        conn.close()


def _rows(inst, ids) -> list[tuple]:
    """Those rows of a zone, whole (values, origin, version), by id."""
    conn = inst.connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM tenants WHERE tenant_id IN ({', '.join(map(str, ids))}) ORDER BY tenant_id")
            return list(cur.fetchall())
    finally:
        conn.close()


def _position(inst, source: str, partition: int) -> tuple:
    """(applied LSN, Kafka offset, status, detail) of a source partition in a target zone."""
    conn = inst.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT applied_lsn, kafka_offset, status, detail FROM zonesync.apply_state "
                "WHERE source_zone = %s AND partition_no = %s",
                (source, partition),
            )
            return cur.fetchone()
    finally:
        conn.close()


def _end_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "retention-test"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)[1]
    finally:
        consumer.close()


def _requests(meta) -> list[tuple]:
    rows, _ = meta.run(
        "SELECT partition_no, from_lsn, status, detail FROM resend_requests "
        "WHERE source_zone = 'a' AND target_zone = 'b' ORDER BY id"
    )
    return [tuple(r) for r in rows]


def _halt_alerts(meta) -> list[dict]:
    rows, _ = meta.run("SELECT detail FROM alerts WHERE zone = 'b' AND kind = 'partition_halted' ORDER BY id")
    return [json.loads(r[0]) for r in rows]


def _purge_binlog_before_current(conn, meta, needed_file: str) -> None:
    """Zone a's binlog loses every file before a fresh one (PURGE BINARY LOGS, or the
    server's expiry), `needed_file` among them; the replicator's own checkpoint is moved
    into the fresh file first (it is idle: its heartbeat moves it), so it reads on."""
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        newest = cur.fetchone()[0]
        wait_until(
            lambda: latest_checkpoint(meta, "a").log_file == newest, 10, "zone a's checkpoint is in the new file"
        )
        cur.execute("FLUSH ENGINE LOGS")  # the server keeps files its crash recovery needs until then
        deadline = time.monotonic() + 10
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            if needed_file not in [r[0] for r in cur.fetchall()]:
                return
            assert time.monotonic() < deadline, f"the server kept {needed_file}"
            time.sleep(0.2)


class PrefixWatch(Background):
    """Samples zone b while it runs: the rows of zone a's expired partition there must
    always be a prefix of the order zone a wrote them in (one row per transaction), i.e.
    nothing is applied past a gap. Records every sample that breaks it."""

    name = "prefix-watch"

    def __init__(self, inst, order: list[int]):
        super().__init__()
        self.inst, self.order = inst, order
        self.samples, self.broken = 0, []

    def _run(self) -> None:
        conn = self.inst.connect("zonesync_app")
        conn.autocommit(True)
        wanted = set(self.order)
        try:
            while not self._stop.is_set():
                with conn.cursor() as cur:
                    cur.execute("SELECT tenant_id FROM tenants")
                    have = {r[0] for r in cur.fetchall()} & wanted
                self.samples += 1
                if have != set(self.order[: len(have)]):
                    self.broken.append(sorted(have))
                time.sleep(0.02)
        finally:
            conn.close()


@pytest.fixture
def expiring(meta, zones, broker, test_cfg, guard_env):
    """Replicators of a, b, c; appliers of b and c, zone b's reading zone a's topic through
    a twin (zone a's own topic until the twin is made)."""
    reset_state(zones, meta)
    twin_of: dict[str, str] = {}
    cluster = Cluster(
        zones,
        meta,
        broker,
        test_cfg.broker_file,
        partitions=PARTITIONS,
        relay_topic_of=lambda z: twin_of.get(z, cluster.topic(z)),
    )
    relays: list[TailRelay] = []
    cluster.start(which=("replicator",))
    cluster.start(which=("applier",), zones=("b", "c"), resend_timeout=0.3)
    cluster.wait_started()
    yield cluster, twin_of, relays
    for relay in relays:
        relay.stop()
    cluster.stop()
    reset_state(zones, meta)


class Expired:
    """Zone b stopped after applying the "applied" rows, zone a wrote the "down" rows, and
    the head of zone a's expired partition is gone: zone b's next message and some more
    (the first half of what was written meanwhile). Zone b is not started again yet."""

    def __init__(self, cluster, twin_of, zones, meta, test_cfg, guards, hold_resend: float = 0.0):
        self.cluster, self.zones, self.meta = cluster, zones, meta
        self.twin_of, self.guards = twin_of, guards
        _write(*guards, "applied")
        applied = set(_phase(A_IDS[EXPIRED], "applied") + _phase(A_IDS[KEPT], "applied") + _phase(C_IDS, "applied"))
        wait_until(lambda: applied <= _tenant_ids(zones["b"]), 20, "zone b applied the first rows")
        cluster.stop("applier-b")
        self.applied_lsn, self.applied_offset, status, _ = _position(zones["b"], "a", EXPIRED)
        assert status == "running" and self.applied_offset >= 0

        # zone b is down: zones a and c go on writing (zone c's applier takes zone a's rows)
        _write(*guards, "down")
        down_a = set(_phase(A_IDS[EXPIRED], "down") + _phase(A_IDS[KEPT], "down"))
        wait_until(
            lambda: down_a <= _tenant_ids(zones["c"]), 20, "zone a's replicator published the rows written meanwhile"
        )
        self.ends = {p: _end_offset(cluster.bootstrap(), cluster.topic("a"), p) for p in (EXPIRED, KEPT)}
        meanwhile = self.ends[EXPIRED] - (self.applied_offset + 1)
        assert meanwhile >= 2, f"only {meanwhile} messages in the expired partition while zone b was down"
        self.keep_from = self.applied_offset + 1 + meanwhile // 2
        self.twin = f"{cluster.prefix}.expired.a"
        broker_mod.create_topic(test_cfg.broker_file, self.twin, PARTITIONS)
        self.relay = TailRelay(
            cluster.bootstrap, cluster.topic("a"), self.twin, PARTITIONS, {EXPIRED: self.keep_from}, hold_resend
        )

    def expire(self) -> list[int]:
        """The twin holds only the tail; returns the ids whose events zone b never got."""
        self.relay.start()
        wait_until(lambda: self.relay.caught_up(self.ends), 10, "the twin holds the tail")
        lost = sorted(e.pk["tenant_id"] for p, offset, e in self.relay.lost if offset > self.applied_offset)
        assert lost and set(lost) <= set(_phase(A_IDS[EXPIRED], "down")), lost
        assert {e.partition for _, _, e in self.relay.lost} == {EXPIRED}
        self.twin_of["a"] = self.twin
        return lost

    def restart_b(self, **applier_kw) -> None:
        """Zone b comes back (its next message is gone from the topic) and zones a, c write on."""
        self.cluster.start(which=("applier",), zones=("b",), **applier_kw)
        _write(*self.guards, "back")


EXPIRED_ORDER = _phase(A_IDS[EXPIRED], "applied", "down", "back")
EVERYTHING_A = sorted(set(EXPIRED_ORDER) | set(_phase(A_IDS[KEPT], "applied", "down", "back")))
EVERYTHING_C = _phase(C_IDS, "applied", "down", "back")


@pytest.fixture
def expired(expiring, zones, meta, test_cfg, guard_env):
    """Make an Expired (with TailRelay's options): the relay is stopped after the test."""
    cluster, twin_of, relays = expiring

    def make(**relay_kw) -> Expired:
        made = Expired(cluster, twin_of, zones, meta, test_cfg, (guard_env("a"), guard_env("c")), **relay_kw)
        relays.append(made.relay)
        return made

    return make


def test_a_resend_from_the_binlog_repairs_an_expired_head(expired, zones, meta):
    """While the binlog still has the lost events, the resend repairs the partition: zone b
    ends with exactly zone a's rows, and at no moment held a row past the gap."""
    case = expired()
    lost = case.expire()
    with PrefixWatch(zones["b"], EXPIRED_ORDER) as watch:
        case.restart_b(resend_timeout=1.0)
        everything = set(EVERYTHING_A) | set(EVERYTHING_C)
        converged = wait_until(lambda: _tenant_ids(zones["b"]) >= everything, 20, "zone b converged", must=False)
    assert watch.samples > 10 and watch.broken == [], f"applied past the gap: {watch.broken[:3]}"
    assert converged, f"zone b lacks {sorted(everything - _tenant_ids(zones['b']))}"
    assert _rows(zones["b"], EVERYTHING_A) == _rows(zones["a"], EVERYTHING_A)
    assert _rows(zones["b"], EVERYTHING_C) == _rows(zones["c"], EVERYTHING_C)
    assert set(lost) <= _tenant_ids(zones["b"]), "the lost rows came back with the resend"
    requests = _requests(meta)
    assert requests and requests[0][:3] == (EXPIRED, case.applied_lsn, "done"), requests  # from its position
    assert {r[0] for r in requests} == {EXPIRED} and "failed" not in {r[2] for r in requests}, requests
    position = _position(zones["b"], "a", EXPIRED)
    assert position[2] == "running" and position[0] > case.applied_lsn, position
    assert _halt_alerts(meta) == []


def test_a_resend_behind_a_long_retained_tail_is_waited_for(expired, zones, meta):
    """The resent events land behind everything the topic still holds, which the applier
    reads first (held back here by the relay, as a long retained tail would): the resend
    is served, and repairs the partition once the applier gets there. Counting it as failed
    before the applier read that far would halt a partition the binlog can repair."""
    case = expired(hold_resend=6.0)
    case.expire()
    case.restart_b(resend_timeout=0.3, max_resends=3)
    everything = set(EVERYTHING_A) | set(EVERYTHING_C)

    def settled():
        return _position(zones["b"], "a", EXPIRED)[2] == "halted" or _tenant_ids(zones["b"]) >= everything

    wait_until(settled, 25, "zone b converged or halted")
    assert _halt_alerts(meta) == [], "halted though the binlog could repair it"
    assert _rows(zones["b"], EVERYTHING_A) == _rows(zones["a"], EVERYTHING_A)
    assert case.relay.resend_seen is not None


@pytest.mark.parametrize(
    "history",
    ["checkpoints_pruned", "binlog_purged"],
)
def test_an_expired_head_the_source_cannot_resend_halts_only_its_partition(expired, zones, meta, history):
    """The resend cannot be served: the replicator's checkpoint history no longer reaches
    back to zone b's position, or the binlog file it would re-read was purged. The
    partition halts with an alert ("needs full copy"), nothing past the gap is applied,
    and zone a's other partition, zone c, and zone a's changes in zone c go on."""
    case = expired()
    if history == "checkpoints_pruned":
        meta.run(
            "DELETE FROM replicator_checkpoints WHERE zone = 'a' AND lsn < "
            "(SELECT m FROM (SELECT MAX(lsn) m FROM replicator_checkpoints WHERE zone = 'a') x)"
        )
    else:
        store = CheckpointStore(meta, "a")
        try:
            resend_from = store.for_resend(EXPIRED, case.applied_lsn)
        finally:
            store.close()
        assert resend_from is not None
        conn = zones["a"].connect()
        conn.autocommit(True)
        try:
            _purge_binlog_before_current(conn, meta, resend_from.log_file)
        finally:
            conn.close()
    case.expire()
    with PrefixWatch(zones["b"], EXPIRED_ORDER) as watch:
        case.restart_b(resend_timeout=0.3)
        wait_until(lambda: _position(zones["b"], "a", EXPIRED)[2] == "halted", 15, "the expired partition halted")
        kept = set(_phase(A_IDS[KEPT], "applied", "down", "back")) | set(EVERYTHING_C)
        wait_until(lambda: kept <= _tenant_ids(zones["b"]), 15, "zone b applied zone a's other partition and zone c")
        wait_until(lambda: set(EVERYTHING_A) <= _tenant_ids(zones["c"]), 15, "zone c applied everything of zone a")
        time.sleep(0.5)  # (time for anything wrongly applied past the gap to show)
    assert watch.samples > 10 and watch.broken == [], f"applied past the gap: {watch.broken[:3]}"
    # nothing past the gap: exactly the rows zone b applied before it stopped
    assert _tenant_ids(zones["b"]) & set(EXPIRED_ORDER) == set(_phase(A_IDS[EXPIRED], "applied"))
    position = _position(zones["b"], "a", EXPIRED)
    assert position[0] == case.applied_lsn and "full copy" in position[3], position
    requests = _requests(meta)
    assert [r[:3] for r in requests] == [(EXPIRED, case.applied_lsn, "failed")], requests
    assert "full copy" in requests[0][3], requests
    (alert,) = _halt_alerts(meta)  # one alert, naming the partition and where it stopped
    assert (alert["source"], alert["partition"], alert["applied_lsn"]) == ("a", EXPIRED, case.applied_lsn), alert
    assert "full copy" in alert["detail"]
    assert _position(zones["b"], "a", KEPT)[2] == "running"
    assert {_position(zones["b"], "c", p)[2] for p in range(PARTITIONS)} == {"running"}
