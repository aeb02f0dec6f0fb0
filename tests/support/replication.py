"""In-process replication for tests: a replicator and an applier per zone as threads,
on topics private to the test, plus convergence and checksum helpers."""

from __future__ import annotations

import json
import threading
import time
import uuid

from tests.support.background import wait_until
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.loop.applier import Applier
from zonesync.apply.loop.settings import ApplierSettings
from zonesync.capture.checkpoints import CheckpointStore
from zonesync.capture.replicator import Replicator
from zonesync.capture.source import SourceDB
from zonesync.dev import broker as broker_mod

ZONES = ("a", "b", "c")
ZONE_IDS = {"a": 1, "b": 2, "c": 3}
APP_TABLES = ("tenants", "orders")
# every meta table that holds replication state
REPLICATION_META = (
    "replicator_checkpoints",
    "capture_segments",
    "capture_starts",
    "replicator_leases",
    "resend_requests",
    "alerts",
    "apply_lag",
    "lag_samples",
    "capture_lag",
    "change_topics",
    "schema_changes",
)


def behind_replication(inst, *statements: str) -> None:
    """Statements run in a zone's app database that its replicator never publishes (the
    damage a consistency check or a switch's verify must find)."""
    conn = inst.connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
            for sql in statements:
                cur.execute(sql)
        conn.commit()
    finally:
        conn.close()


def reset_state(zones, meta) -> None:
    """Empty the app tables and every piece of replication state, before workers start."""
    for name in ZONES:
        conn = zones[name].connect()
        with conn.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
            for t in APP_TABLES:
                cur.execute(f"DELETE FROM zonesync_app.{t}")
            for t in ("apply_state", "tombstones", "row_locks", "table_holds", "parked_events"):
                cur.execute(f"DELETE FROM zonesync.{t}")
        conn.close()
    with meta.connect().cursor() as cur:
        for t in REPLICATION_META:
            cur.execute(f"DELETE FROM {t}")


class Cluster:
    """Replicators and appliers of zones a, b, c on private topics, all as root.

    `check_owners` (the appliers' check that each event's zone owned its row's ZSID, in a
    table the rules declare: apply/loop/owner_history.py) is off unless asked for: most
    replication tests write rows as root, behind the guards, in whichever zone suits the
    case (any tenant in zone a, tables no rules declare); tests whose writes go through
    guards, and the switch's, run with it on."""

    def __init__(
        self,
        zones,
        meta,
        broker_info,
        broker_file,
        partitions=4,
        topic_suffix=None,
        relay_topic_of=None,
        check_owners=False,
    ):
        self.zones = zones
        self.check_owners = check_owners
        self.meta = meta
        self.partitions = partitions
        self.prefix = f"t{uuid.uuid4().hex[:8]}"
        self.broker_file = broker_file
        self.bootstrap = lambda: broker_mod.read_info(broker_file)["bootstrap"]
        for z in ZONES:
            broker_mod.create_topic(broker_file, self.topic(z), partitions)
        self.apply_topic = relay_topic_of or self.topic
        self.replicators: dict[str, Replicator] = {}
        self.appliers: dict[str, Applier] = {}
        self.threads: dict[str, threading.Thread] = {}

    def topic(self, zone: str) -> str:
        return f"{self.prefix}.zonesync.{zone}.changes"

    def make_replicator(self, z: str) -> Replicator:
        inst = self.zones[z]
        return Replicator(
            z,
            ZONE_IDS[z],
            SourceDB("127.0.0.1", inst.port, "root", "", ["zonesync_app"]),
            self.meta,
            server_id=5000 + ZONE_IDS[z],
            partitions=self.partitions,
            bootstrap=self.bootstrap,
            topic_of=self.topic,
        )

    def make_applier(self, z: str, **kw) -> Applier:
        inst = self.zones[z]
        return Applier(
            z,
            [o for o in ZONES if o != z],
            lambda: ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app"),
            self.meta,
            partitions=self.partitions,
            bootstrap=self.bootstrap,
            topic_of=self.apply_topic,
            settings=ApplierSettings(**{"check_owners": self.check_owners, **kw}),
        )

    def start(self, which=("replicator", "applier"), zones=ZONES, **applier_kw) -> None:
        for z in zones:
            if "replicator" in which:
                self._run(f"replicator-{z}", self.replicators.setdefault(z, self.make_replicator(z)))
            if "applier" in which:
                self._run(f"applier-{z}", self.appliers.setdefault(z, self.make_applier(z, **applier_kw)))

    def wait_started(self, timeout: float = 15.0) -> None:
        """Replicators have taken their start position (writes from now on are captured)."""
        deadline = time.monotonic() + timeout
        for z in self.replicators:
            store = CheckpointStore(self.meta, z)
            try:
                while store.latest() is None:
                    assert time.monotonic() < deadline, f"replicator {z} did not start"
                    time.sleep(0.05)
            finally:
                store.close()

    def _run(self, name, worker) -> None:
        worker.stopping = False
        t = threading.Thread(target=worker.run, name=name, daemon=True)
        t.start()
        self.threads[name] = t

    def stop(self, name: str | None = None) -> None:
        names = [name] if name else list(self.threads)
        for n in names:
            kind, z = n.split("-", 1)
            worker = (self.replicators if kind == "replicator" else self.appliers).pop(z, None)
            if worker:
                worker.stop()
        for n in names:
            t = self.threads.pop(n, None)
            if t:
                t.join(20)
                assert not t.is_alive(), f"{n} did not stop"


def checksum(inst, table: str = "tenants") -> tuple:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY 1")
        return tuple(cur.fetchall())


def wait_converged(zones, tables=APP_TABLES, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        sums = {t: {z: checksum(zones[z], t) for z in ZONES} for t in tables}
        if all(len(set(v.values())) == 1 for v in sums.values()):
            return sums
        if time.monotonic() > deadline:
            detail = {t: {z: len(rows) for z, rows in v.items()} for t, v in sums.items()}
            raise AssertionError(f"zones did not converge within {timeout} s: row counts {detail}")
        time.sleep(0.1)


def wait_same(zones, target: str, source: str = "a", timeout: float = 40.0, table: str = "tenants") -> None:
    """Wait until zone `target`'s table holds exactly `source`'s rows (every column)."""
    wait_until(
        lambda: checksum(zones[target], table) == checksum(zones[source], table),
        timeout,
        f"zone {target} equals zone {source}",
    )


def row_locks(inst) -> int:
    """How many rows the zone's applier holds locked (zonesync.row_locks)."""
    with inst.connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
        return int(cur.fetchone()[0])


def replicator_alone(cluster, zone: str, seconds: float = 7):
    """A fresh replicator of `zone` run for `seconds` in a thread, then returned (stopped)."""
    replicator = cluster.make_replicator(zone)
    runner = threading.Thread(target=replicator.run, kwargs={"max_seconds": seconds}, daemon=True)
    runner.start()
    runner.join(seconds + 13)
    assert not runner.is_alive(), f"replicator {zone} did not stop after {seconds} s"
    return replicator


def alerts(meta, zone: str, kind: str) -> list[dict]:
    """The details of a zone's alerts of one kind, oldest first."""
    with meta.connect().cursor() as cur:
        cur.execute("SELECT detail FROM alerts WHERE zone = %s AND kind = %s ORDER BY id", (zone, kind))
        return [json.loads(r[0]) for r in cur.fetchall()]


def latest_checkpoint(meta, zone: str):
    """The zone's newest replicator checkpoint (None before its first)."""
    store = CheckpointStore(meta, zone)
    try:
        return store.latest()
    finally:
        store.close()


def checkpoint_history(meta, zone: str) -> list:
    """Every checkpoint the zone's replicator saved that is still kept, oldest first."""
    store = CheckpointStore(meta, zone)
    try:
        return store.history()
    finally:
        store.close()


def applied_through(inst, source: str, lsns_by_partition: dict[int, int]) -> bool:
    """The zone `inst` applied `source`'s changes through these LSNs in each partition."""
    with inst.connect().cursor() as cur:
        cur.execute("SELECT partition_no, applied_lsn FROM zonesync.apply_state WHERE source_zone = %s", (source,))
        applied = {int(p): int(lsn) for p, lsn in cur.fetchall()}
    return all(applied.get(p, 0) >= lsn for p, lsn in lsns_by_partition.items())


def insert_tenants(conn, first: int, count: int) -> None:
    """Tenants first .. first+count-1 written straight into a zone (origin 1, version =
    id + 1), as an application outside the guard would: captured like any write."""
    with conn.cursor() as cur:
        for tenant in range(first, first + count):
            cur.execute(
                "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, 'x', 1, %s)",
                (tenant, tenant + 1),
            )


def settled_reconciliation(meta, zones, target: str, sources=None, timeout: float = 10) -> list:
    """`zonesync reconcile`'s rows for a target zone once every partition is comparable (the
    replicators' idle checkpoints reach what the target applied), or at the timeout."""
    from zonesync.apply.tools.reconcile import MISMATCH, OK, reconcile

    deadline = time.monotonic() + timeout
    while True:
        conn = zones[target].connect()
        try:
            rows = reconcile(meta, conn, sources)
        finally:
            conn.close()
        if all(r.status in (OK, MISMATCH) for r in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)
