"""S003-27 (loop control independent of topology config: 两个 channel 各一个 pipeline 会重复回环):
zones join, leave and come back, and the cluster is restarted with another set of zones,
with no per-pair configuration anywhere: every replicator is built the same way whatever
the topology, and each applier is only told which zones it reads.

1. zones a and b replicate between themselves (c's workers not started);
2. c is added: its replicator starts, its applier catches up from the start of a's and
   b's topics, and a's and b's appliers are restarted with c as a source;
3. c's workers stop (a and b go on; c's guard keeps writing);
4. the whole cluster is restarted with the zones b and c only;
5. a rejoins.

Throughout, no applier write is ever published: every replicator publishes exactly its
own zone's writes (counted by the replicators, and read back from the topics), and every
zone ends with the same rows.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.support.replication import ZONE_IDS, ZONES, Cluster, checksum, reset_state, wait_converged
from tests.support.topics import copies_by_lsn
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.loop.applier import Applier
from zonesync.events import DELETE

pytestmark = pytest.mark.integration

FIRST_TENANT = {"a": 0, "b": 400, "c": 800}  # each zone writes its own ZSIDs (baseline rules)
ROWS = 6  # rows a burst leaves (8 inserted, 2 deleted)


class ZoneWrites:
    """A zone's own writes through its guard: inserts, updates and deletes of its tenants."""

    def __init__(self, guard, zone: str):
        self.guard = guard
        self.zone = zone
        self.next = FIRST_TENANT[zone]
        self.live: list[int] = []
        self.made = 0

    def burst(self, phase: int) -> None:
        """8 inserts, 4 updates, 2 deletes: 14 row changes, each its own transaction."""
        for _ in range(8):
            with self.guard.transaction() as tx:
                tx.insert("tenants", {"tenant_id": self.next, "name": f"{self.zone} p{phase}"})
            self.live.append(self.next)
            self.next += 1
        for tenant in self.live[-8:-6] + (self.live[:2] if phase > 1 else self.live[-6:-4]):
            with self.guard.transaction() as tx:
                assert tx.update("tenants", {"tenant_id": tenant}, {"name": f"{self.zone} p{phase} updated"}) == 1
        for tenant in self.live[-2:]:
            with self.guard.transaction() as tx:
                assert tx.delete("tenants", {"tenant_id": tenant}) == 1
        del self.live[-2:]
        self.made += 14


class Topology:
    """The cluster's workers, started per zone with the sources the topology gives its
    applier; every replicator instance is kept for its published count."""

    def __init__(self, cluster, meta, zones):
        self.cluster = cluster
        self.meta = meta
        self.zones = zones
        self.replicators: dict[str, list] = {z: [] for z in ZONES}
        self.appliers: dict[str, list] = {z: [] for z in ZONES}

    def start_replicator(self, zone: str) -> None:
        self.cluster.start(which=("replicator",), zones=(zone,))
        self.replicators[zone].append(self.cluster.replicators[zone])

    def start_applier(self, zone: str, sources: list[str]) -> None:
        inst = self.zones[zone]
        applier = Applier(
            zone,
            sources,
            lambda: ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app"),
            self.meta,
            partitions=self.cluster.partitions,
            bootstrap=self.cluster.bootstrap,
            topic_of=self.cluster.topic,
        )
        self.cluster.appliers[zone] = applier  # Cluster.start runs the one it holds
        self.cluster.start(which=("applier",), zones=(zone,))
        self.appliers[zone].append(applier)

    def stop(self, zone: str, which=("replicator", "applier")) -> None:
        for kind in which:
            if f"{kind}-{zone}" in self.cluster.threads:
                self.cluster.stop(f"{kind}-{zone}")

    def published(self) -> dict[str, int]:
        return {z: sum(r.published for r in self.replicators[z]) for z in ZONES}

    def applied(self) -> int:
        return sum(a.applied for runs in self.appliers.values() for a in runs)


def _wait_same(zones, names: tuple[str, ...], timeout: float = 30.0) -> tuple:
    deadline = time.monotonic() + timeout
    while True:
        rows = {z: checksum(zones[z]) for z in names}
        if len(set(rows.values())) == 1:
            return rows[names[0]]
        assert time.monotonic() < deadline, (
            f"zones {names} did not converge: { ({z: len(r) for z, r in rows.items()}) }"
        )
        time.sleep(0.1)


def _wait_published(topology, expected: dict[str, int], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while topology.published() != expected:
        assert time.monotonic() < deadline, f"published {topology.published()}, the zones' own writes {expected}"
        time.sleep(0.1)


@pytest.fixture
def idle_cluster(meta, zones, broker, test_cfg, guard_env):
    """Fresh topics and replication state, no worker started: the test starts each one."""
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file)
    yield cluster
    cluster.stop()


def test_zones_added_removed_and_restarted_never_publish_applied_writes(idle_cluster, guard_env, meta, zones):
    cluster = idle_cluster
    topology = Topology(cluster, meta, zones)
    writes = {z: ZoneWrites(guard_env(z), z) for z in ZONES}
    made = lambda: {z: writes[z].made for z in ZONES}  # noqa: E731

    # 1. zones a and b only
    for z in ("a", "b"):
        topology.start_replicator(z)
    cluster.wait_started()
    topology.start_applier("a", ["b"])
    topology.start_applier("b", ["a"])
    writes["a"].burst(1)
    writes["b"].burst(1)
    assert len(_wait_same(zones, ("a", "b"))) == 2 * ROWS
    assert checksum(zones["c"]) == (), "c takes no part yet"
    _wait_published(topology, made())

    # 2. zone c joins: its applier reads a's and b's topics from their start
    topology.start_replicator("c")
    cluster.wait_started()
    topology.start_applier("c", ["a", "b"])
    for z in ("a", "b"):
        topology.stop(z, ("applier",))
        topology.start_applier(z, [o for o in ZONES if o != z])
    assert len(_wait_same(zones, ZONES)) == 2 * ROWS, "c caught up with what a and b wrote before it joined"
    for z in ZONES:
        writes[z].burst(2)
    assert len(_wait_same(zones, ZONES)) == (2 + 3) * ROWS
    _wait_published(topology, made())

    # 3. c's workers stop; a and b go on, and c's guard keeps writing
    topology.stop("c")
    c_published = writes["c"].made  # c's writes from now on wait for its replicator
    for z in ZONES:
        writes[z].burst(3)
    assert len(_wait_same(zones, ("a", "b"))) == (2 + 3 + 2) * ROWS, "all but c's writes since it stopped"
    assert len(checksum(zones["c"])) == (2 + 3 + 1) * ROWS, "c has its own writes, not a's and b's since it stopped"
    _wait_published(topology, {**made(), "c": c_published})

    # 4. the whole cluster restarted with zones b and c only
    for z in ("a", "b"):
        topology.stop(z)
    for z in ("b", "c"):
        topology.start_replicator(z)
    topology.start_applier("b", ["a", "c"])
    topology.start_applier("c", ["a", "b"])
    a_published = writes["a"].made  # a's writes from now on wait for its replicator
    for z in ZONES:
        writes[z].burst(4)
    assert len(_wait_same(zones, ("b", "c"))) == (2 + 3 + 3 + 2) * ROWS, "b and c have everything but a's last"
    _wait_published(topology, {**made(), "a": a_published})

    # 5. a rejoins
    topology.start_replicator("a")
    topology.start_applier("a", ["b", "c"])
    sums = wait_converged(zones, ("tenants",))
    assert len(sums["tenants"]["a"]) == (2 + 3 + 3 + 3) * ROWS, "every zone's rows of every phase"
    _wait_published(topology, made())

    # No loop: each topic holds exactly its zone's own writes, never a row another zone wrote.
    for z in ZONES:
        events = {lsn: copies[-1] for lsn, copies in copies_by_lsn(cluster, z).items()}
        assert len(events) == writes[z].made, f"zone {z}'s topic holds {len(events)} events, it wrote {made()[z]}"
        origins = Counter((e.old if e.op == DELETE else e.new)["_zs_origin"] for e in events.values())
        assert origins == {ZONE_IDS[z]: writes[z].made}, f"zone {z} published rows it did not write: {origins}"
    assert topology.published() == made()
    assert topology.applied() == 2 * sum(made().values()), "each zone's writes applied once in each other zone"
