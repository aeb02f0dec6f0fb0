"""Update loop, two quick updates (S000-44): zone a updates one row twice before its
first copy could come back (age 21, then 22; here the row's name), again and again.
No zone ever shows an older value after a newer one, every zone ends at a's last value,
and there is no loop traffic: only a's replicator publishes, one event per change."""

from __future__ import annotations

import time

import pytest

from tests.support.background import Background
from tests.support.replication import ZONES, wait_converged

pytestmark = pytest.mark.integration

ROUNDS = 8


class Sampler(Background):
    """Reads tenant 7's name in one zone as fast as it can, until stopped; keeps the
    sequence of values seen (consecutive repeats collapsed)."""

    def __init__(self, inst, zone: str):
        super().__init__()
        self.name = f"sampler-{zone}"
        self.conn = inst.connect("zonesync_app")
        self.conn.autocommit(True)  # each read sees what is committed now
        self.seen: list[str] = []
        self.reads = 0

    def _run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self._stop.is_set():
                    cur.execute("SELECT name FROM tenants WHERE tenant_id = 7")
                    row = cur.fetchone()
                    self.reads += 1
                    if row and (not self.seen or self.seen[-1] != row[0]):
                        self.seen.append(row[0])
        finally:
            self.conn.close()


def _traffic(cluster) -> tuple[dict, dict]:
    return (
        {z: cluster.replicators[z].published for z in ZONES},
        {z: cluster.appliers[z].applied for z in ZONES},
    )


def test_two_quick_updates_never_show_the_older_value_after_the_newer_and_make_no_loop(cluster, guard_env, zones):
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "20"})
    wait_converged(zones, ("tenants",))
    order = ["20"]
    with Sampler(zones["b"], "b") as sb, Sampler(zones["c"], "c") as sc:
        for r in range(ROUNDS):
            for _ in range(2):  # two quick updates, each its own transaction
                order.append(str(int(order[-1]) + 1))
                with ga.transaction() as tx:
                    assert tx.update("tenants", {"tenant_id": 7}, {"name": order[-1]}) == 1
            time.sleep(0.02 * r)  # some rounds before the copies could come back, some after
        sums = wait_converged(zones, ("tenants",))
        time.sleep(0.3)
    assert [r[1] for r in sums["tenants"]["a"]] == [order[-1]]
    for zone, sampler in (("b", sb), ("c", sc)):
        assert sampler.reads > 10 and sampler.seen, f"zone {zone} was sampled"
        ranks = [order.index(v) for v in sampler.seen]
        assert ranks == sorted(ranks), f"zone {zone} showed an older value after a newer one: {sampler.seen}"
        assert sampler.seen[-1] == order[-1], f"zone {zone} ends at a's last value: {sampler.seen}"

    # no loop traffic: a published exactly its own changes (the insert, two updates per
    # round), b and c nothing; nothing came back to a; and the traffic stops
    made = 1 + 2 * ROUNDS
    published, applied = _traffic(cluster)
    assert published == {"a": made, "b": 0, "c": 0}, published
    assert applied["a"] == 0, applied
    assert 0 < applied["b"] <= made and 0 < applied["c"] <= made, applied
    time.sleep(1.5)
    assert _traffic(cluster) == (published, applied), "traffic stopped"
