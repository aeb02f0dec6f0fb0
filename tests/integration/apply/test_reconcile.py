"""Seed S002-10: published = applied + skipped + held, per source zone and partition,
counted independently by the replicator (with its checkpoints) and by the target (with
its positions); `zonesync reconcile` compares them and alerts a difference."""

from __future__ import annotations

import random

import pytest

from tests.support.replication import ZONES, alerts, settled_reconciliation, wait_converged
from zonesync import cli
from zonesync.apply.tools.reconcile import OK

pytestmark = pytest.mark.integration

OWNED = {"a": range(0, 400), "b": range(400, 800), "c": range(800, 1024)}


def test_counts_agree_after_a_mixed_load_and_a_difference_is_alerted(cluster, guard_env, zones, meta, capsys):
    rnd = random.Random(3)
    for zone in ZONES:
        guard = guard_env(zone)
        for _ in range(60):
            tenant = rnd.choice(OWNED[zone][:40])
            with guard.transaction() as tx:
                if not tx.update("tenants", {"tenant_id": tenant}, {"name": f"{zone}{rnd.random():.5f}"}):
                    tx.insert("tenants", {"tenant_id": tenant, "name": "new"})
                if rnd.random() < 0.2:
                    tx.delete("tenants", {"tenant_id": tenant})
    wait_converged(zones)

    rows = settled_reconciliation(meta, zones, "b")
    assert {r.source for r in rows} == {"a", "c"}
    assert all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
    assert sum(r.published for r in rows) == sum(r.committed for r in rows) > 60, "every change counted once"
    assert cli.main(["reconcile", "--zone", "b"]) == 0
    assert "0 differ" in capsys.readouterr().out

    # an event lost between the two ends: the target's count falls one short
    busiest = max(rows, key=lambda r: r.committed)
    with zones["b"].connect().cursor() as cur:
        cur.execute(
            "UPDATE zonesync.apply_state SET events = events - 1 WHERE source_zone = %s AND partition_no = %s",
            (busiest.source, busiest.partition),
        )
    assert cli.main(["reconcile", "--zone", "b"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "1 differ" in out
    found = alerts(meta, "b", "count_mismatch")
    assert [(a["source"], a["partition"], a["published"], a["committed"]) for a in found] == [
        (busiest.source, busiest.partition, busiest.published, busiest.committed - 1)
    ]
