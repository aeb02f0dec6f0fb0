"""S000-67, S001-14: per-key order under load, with parallel workers, while workers are
added or taken away, and with two group-mode applier processes sharing a zone.

Zones a and b each run three clients; each client owns a pair of keys and updates both
in every transaction, in alternating order (k1 then k2, then k2 then k1, ...), the
values counting up (the name is the transaction's number). Replication runs between all
three zones, with more partitions than one worker could take. What must hold:

- watched from another connection while the load runs, a key's value never goes back
  in any target zone, and neither does its `_zs_version`;
- each target's writer was handed every value of every key exactly once, in the order
  the source wrote them, across applier restarts with another worker count (4 workers,
  then 2, then 6: the partition count stays; workers can change);
- different keys went to different workers (a key's to the one its partition maps to);
- in the end every zone holds the same rows, `zonesync reconcile` is clean (nothing lost
  or doubled per partition), and no alert was raised and no row locked.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import pymysql
import pytest

from tests.support import applier_process
from tests.support.background import Background, wait_until
from tests.support.recording import Recorder
from tests.support.replication import ZONES, Cluster, checksum, reset_state, settled_reconciliation, wait_converged
from zonesync.apply.tools.reconcile import OK
from zonesync.dal.errors import WriteRefused

pytestmark = pytest.mark.integration

PAIRS = {
    "a": [(1, 2), (3, 4), (5, 6)],
    "b": [(401, 402), (403, 404), (405, 406)],
}
OWNER = {k: z for z, pairs in PAIRS.items() for pair in pairs for k in pair}
TRANSACTIONS = 300  # per client
PARTITIONS = 8


class PairWriter(threading.Thread):
    """A client updating its two keys in every transaction, values 0, 1, 2, ...: a refused or
    deadlocked transaction is tried again with the same value, so each key's committed
    values are exactly 0 .. done-1, in order. Runs `limit` transactions (None: until
    stopped)."""

    def __init__(self, guard, pair: tuple[int, int], pause: float = 0.004, limit: int | None = TRANSACTIONS):
        super().__init__(name=f"pair-{pair[0]}", daemon=True)
        self.guard, self.pair, self.pause, self.limit = guard, pair, pause, limit
        self.done = 0
        self.retries = 0
        self.stopping = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while (self.limit is None or self.done < self.limit) and not self.stopping:
                self._one(self.done)
                time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _one(self, i: int) -> None:
        keys = self.pair if i % 2 == 0 else self.pair[::-1]
        try:
            with self.guard.transaction() as tx:
                for k in keys:
                    if i == 0:
                        tx.insert("tenants", {"tenant_id": k, "name": str(i)})
                    else:
                        assert tx.update("tenants", {"tenant_id": k}, {"name": str(i)}) == 1
        except (WriteRefused, pymysql.err.OperationalError) as exc:
            if isinstance(exc, pymysql.err.OperationalError) and exc.args[0] not in (1205, 1213):
                raise
            self.retries += 1
            return
        self.done += 1


class OrderWatch(Background):
    """Samples the keys in `targets` (zone -> keys it receives) from connections of its own,
    a fresh snapshot each time: a key's value and its _zs_version must never go back."""

    name = "order-watch"

    def __init__(self, zones, targets: dict[str, list[int]]):
        super().__init__()
        self.zones, self.targets = zones, targets
        self.samples = 0
        self.seen: dict[tuple[str, int], set[int]] = defaultdict(set)  # values seen per (zone, key)
        self.backwards: list[tuple] = []  # (zone, key, what, before, now)

    def _run(self) -> None:
        conns = {z: self.zones[z].connect("zonesync_app") for z in self.targets}
        last: dict[tuple[str, int], tuple[int, int]] = {}
        try:
            while not self._stop.is_set():
                for z, conn in conns.items():
                    conn.commit()  # a fresh snapshot
                    with conn.cursor() as cur:
                        keys = self.targets[z]
                        cur.execute(
                            f"SELECT tenant_id, name, _zs_version FROM tenants WHERE tenant_id IN "
                            f"({', '.join(['%s'] * len(keys))})",
                            keys,
                        )
                        for key, name, version in cur.fetchall():
                            value = int(name)
                            before = last.get((z, key), (-1, 0))
                            if value < before[0]:
                                self.backwards.append((z, key, "value", before[0], value))
                            if version < before[1]:
                                self.backwards.append((z, key, "_zs_version", before[1], version))
                            last[(z, key)] = (max(value, before[0]), max(version, before[1]))
                            self.seen[(z, key)].add(value)
                self.samples += 1
                time.sleep(0.01)
        finally:
            for conn in conns.values():
                conn.close()


def _targets() -> dict[str, list[int]]:
    """Each zone and the keys it receives (the other zones')."""
    return {z: sorted(k for k, owner in OWNER.items() if owner != z) for z in ZONES}


def _lanes_used(rec: Recorder, run: int) -> int:
    """How many of run `run`'s workers have applied a round in this target."""
    with rec.lock:
        return len({lane for (r, _), lanes in rec.lanes.items() if r == run for lane in lanes})


def _wait_progress(writers, fraction: float, timeout: float = 60) -> None:
    wait_until(
        lambda: min(w.done for w in writers) >= fraction * TRANSACTIONS or not any(w.is_alive() for w in writers),
        timeout,
        f"the clients reached {fraction:.0%} of their transactions",
    )


def _assert_clean_end(zones, meta, targets, writers) -> None:
    """Every zone holds each key at its last value; reconcile clean, every change counted
    once; no alert, no resend asked, no lock."""
    sums = wait_converged(zones, ("tenants",), timeout=60)
    final = {k: str(w.done - 1) for w in writers for k in w.pair}
    assert {r[0]: r[1] for r in sums["tenants"]["a"]} == final
    for target in targets:
        rows = settled_reconciliation(meta, zones, target, timeout=20)
        assert rows and all(r.status == OK for r in rows), (target, [r for r in rows if r.status != OK])
        made = sum(2 * w.done for w in writers if OWNER[w.pair[0]] != target)
        assert sum(r.committed for r in rows) == made, target
    rows, _ = meta.run("SELECT zone, kind FROM alerts")
    assert list(rows) == [], f"alerts: {rows}"
    requests, _ = meta.run("SELECT COUNT(*) FROM resend_requests")
    assert list(requests)[0][0] == 0, "a resend was requested"
    for z in ZONES:
        with zones[z].connect().cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
            assert cur.fetchone()[0] == 0, f"locked rows in zone {z}"


@pytest.fixture
def clean_replication(meta, zones, guard_env):
    reset_state(zones, meta)
    yield
    reset_state(zones, meta)


def test_two_keys_per_transaction_stay_in_order_while_workers_change(
    clean_replication, guard_env, zones, meta, broker, test_cfg
):
    worker_counts = (4, 2, 6)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    recorders = {z: Recorder(z, lambda e: int(e.new["name"])) for z in ZONES}
    guards = {z: guard_env(z) for z in PAIRS}
    writers = [PairWriter(guards[z], pair) for z, pairs in PAIRS.items() for pair in pairs]
    targets = _targets()

    def start_appliers(run: int) -> None:
        for z in ZONES:
            # small_round 8: rounds of more than a few events go to the workers
            applier = cluster.make_applier(z, workers=worker_counts[run], small_round=8)
            applier.writer_factory = recorders[z].wrap(applier.writer_factory, run)
            cluster.appliers[z] = applier
        cluster.start(which=("applier",))
        # each run must have shared out rounds to more than one worker in every target
        # before it is stopped: a run stopped while its appliers were still starting (a
        # loaded machine) would test nothing (as in test_partition_worker_counts.py)
        wait_until(lambda: all(_lanes_used(recorders[z], run) > 1 for z in targets), 60,
                   f"run {run}'s appliers shared out rounds to their workers in every target", step=0.02)  # fmt: skip

    try:
        cluster.start(which=("replicator",))
        cluster.wait_started()
        with OrderWatch(zones, targets) as watch:
            for w in writers:
                w.start()
            _wait_progress(writers, 0.1)  # the appliers start behind: a backlog shared out to the workers
            start_appliers(0)
            for run in range(1, len(worker_counts)):
                _wait_progress(writers, 0.1 + 0.8 * run / len(worker_counts))
                for z in ZONES:
                    cluster.stop(f"applier-{z}")
                start_appliers(run)  # another worker count, the same partitions
            for w in writers:
                w.join(120)
                assert not w.is_alive() and w.error is None, f"{w.name}: {w.error!r}"
            wait_converged(zones, ("tenants",), timeout=60)
            time.sleep(0.3)  # a last sample of the converged state
        print(f"\nclient retries {sum(w.retries for w in writers)}, watcher samples {watch.samples}")
    finally:
        for w in writers:  # (a test that failed early leaves no client behind)
            w.stopping = True
            if w.ident is not None:
                w.join(10)
        cluster.stop()

    assert watch.backwards == [], f"a key went back in a target: {watch.backwards[:5]}"
    assert watch.samples > 20
    # the watcher saw the keys move while the load ran, not only their end
    assert all(len(watch.seen[(z, k)]) > 3 for z, keys in targets.items() for k in keys), "the watcher saw no load"
    for z, rec in recorders.items():
        # every value of every key handed to the writer and committed exactly once, in order
        assert {k: rec.values[k] for k in targets[z]} == {k: list(range(TRANSACTIONS)) for k in targets[z]}, z
        for (run, key), lanes in rec.lanes.items():  # a key's partition has one worker
            assert lanes == {rec.partition[key] % worker_counts[run]}, (z, run, key, lanes)
        for run in range(len(worker_counts)):
            used = {lane for (r, _), lanes in rec.lanes.items() if r == run for lane in lanes}
            assert len(used) > 1, f"target {z}, run {run} ({worker_counts[run]} workers): only lanes {used} applied"
    _assert_clean_end(zones, meta, targets, writers)
    for z in ZONES:
        assert checksum(zones[z]) == checksum(zones["a"])


def test_two_group_applier_processes_keep_per_key_order(
    clean_replication, guard_env, zones, meta, broker, test_cfg, tmp_path
):
    """Zone c is applied by two processes in group mode (4 workers each) that share the
    partitions of a's and b's topics; the second joins while the load runs (the partitions
    are handed over mid-stream, and the load goes on until it took its share and beyond).
    Zones a and b apply each other with one applier each."""
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    guards = {z: guard_env(z) for z in PAIRS}
    writers = [PairWriter(guards[z], pair, pause=0.01, limit=None) for z, pairs in PAIRS.items() for pair in pairs]
    targets = _targets()
    logs = [tmp_path / "applier-c-1.log", tmp_path / "applier-c-2.log"]
    procs: list[subprocess.Popen] = []

    def took_partitions(log: Path) -> bool:
        return log.exists() and "took partitions" in log.read_text()

    try:
        cluster.start(which=("replicator",))
        cluster.start(which=("applier",), zones=("a", "b"), small_round=8)
        cluster.wait_started()
        procs.append(applier_process.spawn(cluster, "c", logs[0]))
        with OrderWatch(zones, targets) as watch:
            for w in writers:
                w.start()
            wait_until(lambda: took_partitions(logs[0]), 60, "the first process took the partitions")
            procs.append(applier_process.spawn(cluster, "c", logs[1]))
            wait_until(lambda: took_partitions(logs[1]), 60, "the second process took its share")
            joined_at = min(w.done for w in writers)
            wait_until(lambda: min(w.done for w in writers) >= joined_at + 100, 60, "100 more transactions")
            for w in writers:
                w.stopping = True
                w.join(30)
                assert not w.is_alive() and w.error is None, f"{w.name}: {w.error!r}"
            wait_converged(zones, ("tenants",), timeout=60)
            time.sleep(0.3)
        assert all(p.poll() is None for p in procs), "an applier process died"
        first_log = logs[0].read_text()
        assert "gave up partitions" in first_log, "the first process never handed partitions over"
    finally:
        for w in writers:
            w.stopping = True
            if w.ident is not None:
                w.join(10)
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(20)
        cluster.stop()

    print(f"\ntransactions per client {[w.done for w in writers]}, watcher samples {watch.samples}")
    assert watch.backwards == [], f"a key went back in a target: {watch.backwards[:5]}"
    assert watch.samples > 20
    assert all(len(watch.seen[("c", k)]) > 3 for k in targets["c"]), "the watcher saw no load in zone c"
    _assert_clean_end(zones, meta, targets, writers)
