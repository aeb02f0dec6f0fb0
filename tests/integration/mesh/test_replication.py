"""Full-mesh replication between three real zones through the dev broker."""

from __future__ import annotations

import random

import pytest

from tests.support.replication import ZONES, checksum, wait_converged
from tests.support.rules import rules_doc
from zonesync.meta import guards

pytestmark = pytest.mark.integration

# ZSIDs each zone owns under the baseline rules (tenant_id mod 1024).
OWNED = {"a": range(0, 400), "b": range(400, 800), "c": range(800, 1024)}


def _workload(guard, zone, rnd, ops):
    """Random inserts, updates and deletes of the zone's own tenants; returns row changes made."""
    live: set[int] = set()
    changes = 0
    for _ in range(ops):
        tenant = rnd.choice(OWNED[zone][:60])
        with guard.transaction() as tx:
            if tenant in live and rnd.random() < 0.3:
                changes += tx.delete("tenants", {"tenant_id": tenant})
                live.discard(tenant)
            elif tenant in live:
                changes += tx.update("tenants", {"tenant_id": tenant}, {"name": f"{zone}{rnd.random():.6f}"})
            else:
                tx.insert("tenants", {"tenant_id": tenant, "name": f"{zone}-new"})
                live.add(tenant)
                changes += 1
    return changes


def test_three_zones_converge_without_loops(cluster, guard_env, zones):
    rnd = random.Random(7)
    made = {z: _workload(guard_env(z), z, rnd, 150) for z in ZONES}
    sums = wait_converged(zones)
    assert len(sums["tenants"]["a"]) > 30
    for z in ZONES:  # every row carries the zone that wrote it
        assert {r[3] for r in sums["tenants"][z]} <= {1, 2, 3}
    # No loop traffic: each replicator published exactly its own zone's changes, nothing applied.
    assert {z: cluster.replicators[z].published for z in ZONES} == made
    assert sum(a.applied for a in cluster.appliers.values()) == 2 * sum(made.values())


def test_two_zones_bidirectional(cluster, guard_env, zones):
    ga, gb = guard_env("a"), guard_env("b")
    with ga.transaction() as tx:
        tx.insert("orders", {"order_id": 1, "tenant_id": 5, "amount": "10.50"})
    with gb.transaction() as tx:
        tx.insert("orders", {"order_id": 2, "tenant_id": 405, "amount": "7.25"})
    with ga.transaction() as tx:
        tx.update("orders", {"order_id": 1}, {"amount": "11.00", "status": "paid"})
    wait_converged(zones, ("orders",))
    rows = checksum(zones["b"], "orders")
    assert [(r[0], str(r[2]), r[3], r[5]) for r in rows] == [(1, "11.00", "paid", 1), (2, "7.25", "new", 2)]


def test_row_moved_to_another_owner_then_deleted_reaches_everyone(cluster, guard_env, zones, meta):
    """Seed flaw S000-49: the deleted row's image still says origin a; the delete must reach a."""
    ga, gb = guard_env("a"), guard_env("b")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "born in a"})
    wait_converged(zones, ("tenants",))
    moved = [
        {"zsids": "0-9", "zone": "b"},
        {"zsids": "10-399", "zone": "a"},
        {"zsids": "400-799", "zone": "b"},
        {"zsids": "800-1023", "zone": "c"},
    ]
    guards.push_and_wait(meta, rules_doc(moved), "move 0-9 to b")
    with gb.transaction() as tx:
        assert tx.delete("tenants", {"tenant_id": 7}) == 1
    sums = wait_converged(zones, ("tenants",))
    assert sums["tenants"]["a"] == ()
    # and a new insert by the new owner outranks the tombstone everywhere
    with gb.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "reborn in b"})
    sums = wait_converged(zones, ("tenants",))
    assert [(r[0], r[1], r[3]) for r in sums["tenants"]["a"]] == [(7, "reborn in b", 2)]


def test_changed_behind_the_applier_is_locked_not_overwritten(cluster, guard_env, zones, meta):
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 3, "name": "v1"})
    wait_converged(zones, ("tenants",))
    conn = zones["b"].connect("zonesync_app")
    with conn.cursor() as cur:  # someone edits zone b's copy directly
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute("UPDATE tenants SET name = 'tampered' WHERE tenant_id = 3")
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v2"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v3"})
    import time

    deadline = time.monotonic() + 10
    while checksum(zones["c"])[0][1] != "v3" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checksum(zones["c"])[0][1] == "v3"
    time.sleep(0.5)
    assert checksum(zones["b"])[0][1] == "tampered", "a mismatched row must not be overwritten"
    with conn.cursor() as cur:
        cur.execute("SELECT reason, held_events FROM zonesync.row_locks WHERE table_name = 'tenants'")
        reason, held = cur.fetchone()
    assert "differs from the event's old row in name" in reason and held >= 1
    with meta.connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM alerts WHERE zone = 'b' AND kind = 'row_locked'")
        assert cur.fetchone()[0] >= 1
    # repair: the operator copies the source row, resolves the lock; later changes flow again
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute(
            "UPDATE tenants t JOIN (SELECT 'v3' n) x SET t.name = x.n, t._zs_version = %s WHERE tenant_id = 3",
            (checksum(zones["a"])[0][4],),
        )
        cur.execute("DELETE FROM zonesync.row_locks WHERE table_name = 'tenants' AND pk = '[3]'")
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v4"})
    wait_converged(zones, ("tenants",))


def test_a_column_added_mid_stream_is_replicated(cluster, guard_env, zones):
    """The replicator parses a table map once per table id (freeze_schema): an ALTER gives
    the table a new id, so rows written after it are decoded with the new columns."""
    with guard_env("a").transaction() as tx:
        tx.insert("tenants", {"tenant_id": 1, "name": "before"})
    wait_converged(zones, ("tenants",))
    for z in ZONES:
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("ALTER TABLE tenants ADD COLUMN note VARCHAR(20) NULL")
    try:
        ga = guard_env("a")
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 2, "name": "after", "note": "new column"})
            tx.update("tenants", {"tenant_id": 1}, {"note": "set later"})
        sums = wait_converged(zones, ("tenants",))
        notes = {row[0]: row[-1] for row in sums["tenants"]["b"]}
        assert notes == {1: "set later", 2: "new column"}, sums["tenants"]["b"]
    finally:
        for z in ZONES:
            with zones[z].connect("zonesync_app").cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute("ALTER TABLE tenants DROP COLUMN IF EXISTS note")
