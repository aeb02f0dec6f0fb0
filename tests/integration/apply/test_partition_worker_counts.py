"""S001-15: the source topics' partition count and the applier's worker count differ, and the
worker count changes between runs of an applier: per-key order holds in every combination.

Each zone updates a small set of its own keys many times in a row (inserts, updates and
deletes, one to four keys per transaction), every row's name carrying the key's sequence
number. What must hold in every target zone:
- the writer was handed every change of every key exactly once, in the order the source
  made them (a recording writer, across applier restarts with another worker count);
- each key was applied by the one worker its partition maps to (p % workers), and with
  several partitions and workers more than one worker did apply;
- sampled while it runs, a key's sequence number in a target never goes back;
- in the end every zone holds exactly the rows the sources left, with no locked row and
  no alert.
"""

from __future__ import annotations

import random
import threading
import time

import pymysql
import pytest

from tests.support.background import Background, wait_until
from tests.support.recording import Recorder
from tests.support.replication import ZONES, Cluster, checksum, reset_state, wait_converged
from zonesync.dal.errors import WriteRefused

pytestmark = pytest.mark.integration

KEYS = {"a": range(1, 9), "b": range(401, 409), "c": range(801, 809)}  # owned under the baseline rules
OWNER = {k: z for z, keys in KEYS.items() for k in keys}
TRANSACTIONS = 400  # per zone


def _seq(row: dict) -> int:
    return int(row["name"].split(":")[1])


def marker(op: str, row: dict) -> int:
    """A change's place in its key's history: 2·seq for the row an insert or update leaves,
    2·seq + 1 for the delete of the row with that seq (so a key's markers only go up)."""
    return 2 * _seq(row) + 1 if op == "delete" else 2 * _seq(row)


def _marker_of(event) -> int:
    return marker(event.op, event.old if event.op == "delete" else event.new)


class KeyWriter(threading.Thread):
    """Zone `zone`'s workload on its keys: `transactions` transactions of one to four keys,
    each an insert (key absent), a delete (15%) or an update; `expected` is every key's
    markers in commit order, `final` the rows left."""

    def __init__(self, guard, zone: str, transactions: int, seed: int):
        super().__init__(name=f"writer-{zone}", daemon=True)
        self.guard, self.zone, self.transactions = guard, zone, transactions
        self.rnd = random.Random(seed)
        self.expected: dict[int, list[int]] = {k: [] for k in KEYS[zone]}
        self.final: dict[int, str] = {}
        self.next_seq = dict.fromkeys(KEYS[zone], 1)
        self.done = 0
        self.stopping = False
        self.refused = 0  # transactions refused by the guard or rolled back by a deadlock
        self.deadlocks = 0  # of which rolled back by a lock wait or deadlock with the applier
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.transactions):
                if self.stopping:
                    return
                self._one()
                self.done += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _one(self) -> None:
        keys = self.rnd.sample(list(KEYS[self.zone]), self.rnd.choice((1, 1, 2, 4)))
        made: list[tuple[int, int, str | None]] = []  # (key, marker, name left or None)
        try:
            with self.guard.transaction() as tx:
                for k in keys:
                    if k not in self.final:
                        name = f"{k}:{self.next_seq[k]}"
                        tx.insert("tenants", {"tenant_id": k, "name": name})
                        made.append((k, marker("insert", {"name": name}), name))
                    elif self.rnd.random() < 0.15:
                        assert tx.delete("tenants", {"tenant_id": k}) == 1
                        made.append((k, marker("delete", {"name": self.final[k]}), None))
                        continue
                    else:
                        name = f"{k}:{self.next_seq[k]}"
                        assert tx.update("tenants", {"tenant_id": k}, {"name": name}) == 1
                        made.append((k, marker("update", {"name": name}), name))
                    self.next_seq[k] += 1
        except (WriteRefused, pymysql.err.OperationalError) as exc:
            # refused (a slow moment past the guard's deadline) or a deadlock with the zone's
            # applier, which an application retries: nothing was written
            if isinstance(exc, pymysql.err.OperationalError) and exc.args[0] not in (1205, 1213):
                raise
            self.refused += 1
            self.deadlocks += isinstance(exc, pymysql.err.OperationalError)
            for k, _, name in made:
                if name is not None:
                    self.next_seq[k] -= 1
            return
        for k, mark, name in made:
            self.expected[k].append(mark)
            if name is None:
                self.final.pop(k)
            else:
                self.final[k] = name


class OrderWatch(Background):
    """Samples every zone's rows while replication runs: a key's sequence number never goes
    back in any zone (a key absent for a while comes back with a higher one)."""

    name = "order-watch"

    def __init__(self, zones):
        super().__init__()
        self.zones = zones
        self.samples = 0
        self.backwards: list[tuple[str, int, int, int]] = []  # (zone, key, seen before, seen now)

    def _run(self) -> None:
        conns = {z: self.zones[z].connect("zonesync_app") for z in ZONES}
        seen: dict[tuple[str, int], int] = {}
        try:
            while not self._stop.is_set():
                for z, conn in conns.items():
                    conn.commit()  # a fresh snapshot
                    with conn.cursor() as cur:
                        cur.execute("SELECT tenant_id, name FROM tenants")
                        for key, name in cur.fetchall():
                            seq = _seq({"name": name})
                            before = seen.get((z, key), 0)
                            if seq < before:
                                self.backwards.append((z, key, before, seq))
                            seen[(z, key)] = max(before, seq)
                self.samples += 1
                time.sleep(0.02)
        finally:
            for conn in conns.values():
                conn.close()


def _wait_progress(writers, fraction: float, timeout: float = 30) -> None:
    wait_until(
        lambda: min(w.done for w in writers) >= fraction * TRANSACTIONS or not any(w.is_alive() for w in writers),
        timeout,
        f"writers reached {fraction:.0%}",
        step=0.02,
    )


def _shared_out(rec: Recorder, run: int) -> bool:
    """Has applier run `run` of this target handed a round to its workers?"""
    with rec.lock:
        return any(r == run for r, _ in rec.lanes)


@pytest.fixture
def clean_replication(meta, zones, guard_env):
    reset_state(zones, meta)
    yield
    reset_state(zones, meta)


@pytest.mark.parametrize(
    ("partitions", "worker_counts"),
    [
        pytest.param(1, (4,), id="1-partition-4-workers"),
        pytest.param(3, (2,), id="3-partitions-2-workers"),
        pytest.param(8, (3,), id="8-partitions-3-workers"),
        pytest.param(4, (3, 1, 5), id="4-partitions-workers-3-then-1-then-5"),
    ],
)
def test_per_key_order_holds_for_any_partition_and_worker_count(
    clean_replication, guard_env, zones, meta, broker, test_cfg, partitions, worker_counts
):
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=partitions)  # fresh topics
    recorders = {z: Recorder(z, _marker_of) for z in ZONES}
    writers = [KeyWriter(guard_env(z), z, TRANSACTIONS, seed=i) for i, z in enumerate(ZONES)]

    def start_appliers(run: int, workers: int) -> None:
        for z in ZONES:
            # small_round: rounds of more than a handful of events go to the workers (a quiet
            # stream's rounds stay on one connection), so both paths take turns
            applier = cluster.make_applier(z, workers=workers, small_round=16)
            applier.writer_factory = recorders[z].wrap(applier.writer_factory, run)
            cluster.appliers[z] = applier
        cluster.start(which=("applier",))
        # each run must share out a round before it is stopped: a run stopped while its
        # appliers were still starting (a loaded machine) would test nothing
        wait_until(
            lambda: all(_shared_out(rec, run) for rec in recorders.values()),
            60,
            f"run {run}'s appliers shared out a round in every target",
            step=0.02,
        )

    try:
        cluster.start(which=("replicator",))
        cluster.wait_started()
        with OrderWatch(zones) as watch:
            for w in writers:
                w.start()
            # the appliers start behind (their first rounds are a backlog, shared out to the
            # workers), and each later run starts behind again with another worker count
            _wait_progress(writers, 0.25)
            start_appliers(0, worker_counts[0])
            for run, workers in enumerate(worker_counts[1:], start=1):
                _wait_progress(writers, 0.25 + 0.6 * (run - 0.5) / (len(worker_counts) - 1))
                for z in ZONES:
                    cluster.stop(f"applier-{z}")
                _wait_progress(writers, 0.25 + 0.6 * run / (len(worker_counts) - 1))
                start_appliers(run, workers)
            for w in writers:
                w.join(60)
                assert not w.is_alive() and w.error is None, w.error
            wait_converged(zones, ("tenants",), timeout=30)
            time.sleep(0.3)  # a last sample of the converged state
    finally:
        for w in writers:  # (a test that failed early leaves no writer behind)
            w.stopping = True
            if w.ident is not None:
                w.join(10)
        cluster.stop()

    assert watch.samples > 20 and watch.backwards == [], f"a key went back: {watch.backwards[:5]}"
    final = {k: name for w in writers for k, name in w.final.items()}
    for z in ZONES:
        assert {r[0]: r[1] for r in checksum(zones[z])} == final, f"zone {z} does not hold the sources' rows"
    expected = {k: marks for w in writers for k, marks in w.expected.items()}
    assert sum(w.refused for w in writers) < TRANSACTIONS // 10, "the guard refused too many transactions"
    assert sum(w.deadlocks for w in writers) == 0, "the applier's reads locked rows of the zone's own writers"
    for z, rec in recorders.items():
        others = sorted(k for k in OWNER if OWNER[k] != z)
        # every change of every key handed to the writer exactly once, in the source's order
        assert {k: rec.values[k] for k in others} == {k: expected[k] for k in others}, f"target {z}"
        for (run, key), lanes in rec.lanes.items():  # a key's partition has one worker
            assert lanes == {rec.partition[key] % worker_counts[run]}, (z, run, key, lanes)
        for run, workers in enumerate(worker_counts):
            used = {lane for (r, _), lanes in rec.lanes.items() if r == run for lane in lanes}
            assert used, f"target {z}, run {run}: no round was shared out to the workers"
            if min(workers, partitions) > 1:
                assert len(used) > 1, f"target {z}, run {run} ({workers} workers): only worker {used} applied"
    rows, _ = meta.run("SELECT kind, COUNT(*) FROM alerts GROUP BY kind")
    assert not rows, f"alerts: {rows}"
    for z in ZONES:
        with zones[z].connect().cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
            assert cur.fetchone()[0] == 0, f"locked rows in zone {z}"
