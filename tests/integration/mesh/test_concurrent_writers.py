"""S001-02: replicated writes told apart from regular writes while every zone writes at once.

All three zones run their applications (three client threads per zone, each through its
zone's guard on its own ZSIDs: inserts, updates and deletes, one to three rows per
transaction) while replication runs, so each zone's applier writes the other zones' rows
into the same tables at the same time as the zone's own clients. The skip marker is per
transaction (the applier's session), so what must hold:

- every zone converges (checksums), with no locked row and no alert;
- each replicator published exactly the row changes its own zone's clients made (counted
  by the writers): no applier write was published, no client write was suppressed;
- the topics agree: every event on zone z's topic is a row of origin z, each LSN once;
- each applier applied exactly the other two zones' changes, and `zonesync reconcile` is
  clean for every zone (published = committed per source and partition).
"""

from __future__ import annotations

import random
import threading
import time

import pymysql
import pytest

from tests.support.background import wait_until
from tests.support.replication import ZONE_IDS, ZONES, settled_reconciliation, wait_converged
from tests.support.topics import topic_events
from zonesync import cli
from zonesync.apply.tools.reconcile import OK
from zonesync.dal.errors import WriteRefused

pytestmark = pytest.mark.integration

# three client threads per zone, each on 30 keys of its own (owned by the zone under the baseline rules)
FIRST_KEY = {"a": 1, "b": 401, "c": 801}
KEYS = {(z, t): range(FIRST_KEY[z] + 30 * t, FIRST_KEY[z] + 30 * (t + 1)) for z in ("a", "b", "c") for t in range(3)}
TRANSACTIONS = 150  # per thread: 450 per zone


class ZoneWriter(threading.Thread):
    """A client of one zone: `TRANSACTIONS` transactions on its keys; `changes` counts the
    row changes that committed (a refused or deadlocked transaction changed nothing)."""

    def __init__(self, guard, zone: str, keys: range, seed: int):
        super().__init__(name=f"client-{zone}-{seed}", daemon=True)
        self.guard, self.zone, self.keys = guard, zone, list(keys)
        self.rnd = random.Random(seed)
        self.live: set[int] = set()
        self.changes = 0
        self.committed = 0
        self.rolled_back = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(TRANSACTIONS):
                self._one(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _one(self, i: int) -> None:
        keys = self.rnd.sample(self.keys, self.rnd.choice((1, 1, 2, 3)))
        made, live = 0, set(self.live)
        try:
            with self.guard.transaction() as tx:
                for k in keys:
                    if k not in live:
                        tx.insert("tenants", {"tenant_id": k, "name": f"{self.zone}:{i}"})
                        live.add(k)
                        made += 1
                    elif self.rnd.random() < 0.25:
                        made += tx.delete("tenants", {"tenant_id": k})
                        live.discard(k)
                    else:
                        made += tx.update("tenants", {"tenant_id": k}, {"name": f"{self.zone}:{i}"})
        except (WriteRefused, pymysql.err.OperationalError) as exc:
            if isinstance(exc, pymysql.err.OperationalError) and exc.args[0] not in (1205, 1213):
                raise
            self.rolled_back += 1  # nothing was written: an application would retry
            return
        self.live = live
        self.changes += made
        self.committed += 1


def test_zones_writing_concurrently_publish_only_their_clients_writes(cluster, guard_env, zones, meta, capsys):
    guards = {z: guard_env(z) for z in ZONES}
    writers = [ZoneWriter(guards[z], z, keys, seed=10 * ZONE_IDS[z] + t) for (z, t), keys in KEYS.items()]
    started = time.monotonic()
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
        assert not w.is_alive(), f"{w.name} did not finish"
        assert w.error is None, f"{w.name}: {w.error!r}"
    elapsed = time.monotonic() - started
    applied_meanwhile = {z: cluster.appliers[z].applied for z in ZONES}
    made = {z: sum(w.changes for w in writers if w.zone == z) for z in ZONES}
    committed = sum(w.committed for w in writers)
    with capsys.disabled():
        print(f"\n{committed} client transactions in {elapsed:.1f} s, row changes per zone {made}")
    assert committed >= 0.9 * len(writers) * TRANSACTIONS, "too many client transactions rolled back"
    assert all(n > 400 for n in made.values()), made
    # the appliers wrote into every zone while its clients did
    assert all(n > 0 for n in applied_meanwhile.values()), applied_meanwhile

    # every zone converges, each holding what its own clients left plus the others'
    sums = wait_converged(zones, ("tenants",), timeout=60)
    live = {k for w in writers for k in w.live}
    assert {r[0] for r in sums["tenants"]["a"]} == live
    origin_of = {k: ZONE_IDS[z] for (z, _), keys in KEYS.items() for k in keys}
    assert all(r[3] == origin_of[r[0]] for r in sums["tenants"]["a"]), "a row carries another zone's origin"

    # no applier write was published and no client write suppressed: exact counts
    wait_until(
        lambda: all(cluster.replicators[z].published >= made[z] for z in ZONES), 30, "every client write is published"
    )
    time.sleep(1.0)  # anything published on top would show by now
    assert {z: cluster.replicators[z].published for z in ZONES} == made
    for z in ZONES:
        events = [e for part in topic_events(cluster, z).values() for e in part]
        assert len(events) == made[z], f"topic of {z}: {len(events)} events, its clients made {made[z]}"
        assert len({e.lsn for e in events}) == len(events), f"topic of {z}: an LSN twice"
        foreign = [e for e in events if e.origin_zone != ZONE_IDS[z] or e.source_zone != z]
        assert foreign == [], f"topic of {z} holds rows written by its applier: {foreign[:3]}"
    wait_until(
        lambda: {z: cluster.appliers[z].applied for z in ZONES} == {z: sum(made.values()) - made[z] for z in ZONES},
        20,
        "each applier applied exactly the other zones' changes",
    )

    # `zonesync reconcile`: published = committed, per source and partition, in every zone
    for target in ZONES:
        rows = settled_reconciliation(meta, zones, target, timeout=20)
        assert rows and all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
        by_source = {s: sum(r.committed for r in rows if r.source == s) for s in ZONES if s != target}
        assert by_source == {s: made[s] for s in by_source}, f"target {target}"
        assert cli.main(["reconcile", "--zone", target]) == 0
        assert "0 differ" in capsys.readouterr().out
    rows, _ = meta.run("SELECT zone, kind FROM alerts")
    assert list(rows) == [], f"alerts: {rows}"
    for z in ZONES:
        with zones[z].connect().cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
            assert cur.fetchone()[0] == 0, f"locked rows in zone {z}"
