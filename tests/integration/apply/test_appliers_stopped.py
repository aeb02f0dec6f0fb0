"""S002-19: asynchronous by design. Every applier of every zone is stopped; the zones'
clients go on writing and committing, since a source commit never waits for another
zone. What must hold:

- with all six pairs' appliers stopped, every zone's clients run all their transactions
  to their commit (inserts, updates, deletes through the guards, in all three zones at
  once), and none of it reaches another zone meanwhile;
- meanwhile `zonesync lag` reports every pair as STALE (exit 1): the appliers' last
  figures, only growing older;
- restarted, every applier first reports its pair behind (events and seconds), then
  every pair drops back to 0 behind, the zones converge and `zonesync reconcile` is
  clean for every zone, with no alert.

The commit latencies with the appliers running and stopped are printed, not asserted.
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from tests.support.background import wait_until
from tests.support.replication import ZONES, checksum, settled_reconciliation, wait_converged
from zonesync import cli
from zonesync.apply.tools.progress import lag_report
from zonesync.apply.tools.reconcile import OK

pytestmark = pytest.mark.integration

FIRST_KEY = {"a": 1, "b": 401, "c": 801}  # each zone's own keys under the baseline rules
PAIRS = {(s, t) for s in ZONES for t in ZONES if s != t}


class ZoneClient(threading.Thread):
    """`transactions` guarded transactions on zone `zone`'s keys first .. first+59: inserts,
    updates and deletes; records each commit's latency and the row changes made."""

    def __init__(self, guard, zone: str, first: int, transactions: int):
        super().__init__(name=f"client-{zone}", daemon=True)
        self.guard, self.zone, self.first, self.transactions = guard, zone, first, transactions
        self.live: set[int] = set()
        self.latencies: list[float] = []
        self.changes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(self.transactions):
                key = self.first + i % 60
                started = time.monotonic()
                with self.guard.transaction() as tx:
                    if key not in self.live:
                        tx.insert("tenants", {"tenant_id": key, "name": f"{self.zone}{i}"})
                        self.live.add(key)
                        self.changes += 1
                    elif i % 7 == 0:
                        self.changes += tx.delete("tenants", {"tenant_id": key})
                        self.live.discard(key)
                    else:
                        self.changes += tx.update("tenants", {"tenant_id": key}, {"name": f"{self.zone}{i}"})
                self.latencies.append(time.monotonic() - started)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _run_clients(guards, first: dict[str, int], transactions: int) -> dict[str, ZoneClient]:
    clients = {z: ZoneClient(guards[z], z, first[z], transactions) for z in ZONES}
    for c in clients.values():
        c.start()
    for c in clients.values():
        c.join(120)
        assert not c.is_alive(), f"{c.name} did not finish"
        assert c.error is None, f"{c.name}: {c.error!r}"
        assert len(c.latencies) == transactions
    return clients


def _pairs(meta) -> dict[tuple[str, str], tuple]:
    """(source, target) -> (events behind, seconds behind, report age, stale)."""
    return {(r[0], r[1]): r[2:] for r in lag_report(meta)}


def _own_rows(inst, zone: str) -> int:
    """How many rows of zone `zone`'s keys the zone behind `inst` holds."""
    first = FIRST_KEY[zone]
    return sum(1 for r in checksum(inst) if first <= r[0] < first + 400)


def _stats(latencies: list[float]) -> str:
    return f"median {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"


def test_sources_keep_committing_while_every_applier_is_stopped(cluster, guard_env, zones, meta, capsys):
    guards = {z: guard_env(z) for z in ZONES}
    wait_until(lambda: {p for p, r in _pairs(meta).items() if not r[3]} == PAIRS, 20, "every applier reports its pairs")
    # normal operation: every zone writes while every applier runs
    running = _run_clients(guards, FIRST_KEY, 100)
    wait_converged(zones, ("tenants",), timeout=30)

    for z in ZONES:
        cluster.stop(f"applier-{z}")
    assert not any(name.startswith("applier-") for name in cluster.threads)
    before = {(s, t): _own_rows(zones[t], s) for s, t in PAIRS}
    # every zone's clients write on other keys of theirs while nothing applies anywhere
    stopped = _run_clients(guards, {z: FIRST_KEY[z] + 100 for z in ZONES}, 200)
    for z, c in stopped.items():
        assert _own_rows(zones[z], z) == len(running[z].live) + len(c.live), f"zone {z} lacks its own commits"
    assert {(s, t): _own_rows(zones[t], s) for s, t in PAIRS} == before, "something was applied meanwhile"
    with capsys.disabled():
        for z in ZONES:
            print(
                f"\nzone {z} commits: appliers running {_stats(running[z].latencies)}; "
                f"every applier stopped {_stats(stopped[z].latencies)}",
                end="",
            )
        print()

    # `zonesync lag`: every pair stale, its report only getting older
    wait_until(lambda: all(r[3] for r in _pairs(meta).values()), 20, "every pair shows as stale")
    ages = {p: r[2] for p, r in _pairs(meta).items()}
    assert set(ages) == PAIRS
    capsys.readouterr()
    assert cli.main(["lag"]) == 1
    out = capsys.readouterr().out
    stale_lines = {tuple(line.split()[:2]) for line in out.splitlines() if "STALE" in line}
    assert stale_lines == PAIRS, out
    wait_until(lambda: all(_pairs(meta)[p][2] > ages[p] for p in PAIRS), 10, "the reports grow older")

    # restarted (a few events per round, so the catch-up is seen): every pair behind, then 0
    cluster.start(which=("applier",), max_batch=5)
    behind: dict[tuple[str, str], int] = {}  # the most events behind reported, per pair
    seconds: dict[tuple[str, str], float] = {}

    def caught_up() -> bool:
        now = _pairs(meta)
        for p, (events, secs, _, stale) in now.items():
            if not stale and events > 0:
                behind[p] = max(behind.get(p, 0), events)
                seconds[p] = max(seconds.get(p, 0.0), secs)
        return set(now) == PAIRS and all(not r[3] and r[0] == 0 and r[1] == 0.0 for r in now.values())

    wait_until(lambda: caught_up() and set(behind) == PAIRS, 60, "every pair reported behind, then 0 behind")
    with capsys.disabled():
        print(
            "reported behind after the restart (events, seconds): "
            + ", ".join(f"{s}->{t} {behind[(s, t)]}, {seconds[(s, t)]:.1f} s" for s, t in sorted(PAIRS))
        )
    # each pair's backlog: about what its source wrote while stopped (an estimate: messages
    # times the events of the last message read)
    assert all(behind[(s, t)] > 0 for s, t in PAIRS), behind

    sums = wait_converged(zones, ("tenants",), timeout=60)
    live = {k for c in [*running.values(), *stopped.values()] for k in c.live}
    assert {r[0] for r in sums["tenants"]["a"]} == live
    capsys.readouterr()
    assert cli.main(["lag"]) == 0
    for target in ZONES:
        rows = settled_reconciliation(meta, zones, target, timeout=20)
        assert rows and all(r.status == OK for r in rows), (target, [r for r in rows if r.status != OK])
        made = sum(running[s].changes + stopped[s].changes for s in ZONES if s != target)
        assert sum(r.committed for r in rows) == made, target
        assert cli.main(["reconcile", "--zone", target]) == 0
    raised, _ = meta.run("SELECT zone, kind FROM alerts")
    assert list(raised) == [], f"stopped appliers raised alerts: {raised}"
