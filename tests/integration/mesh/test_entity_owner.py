"""Owner precedence (docs/migration.md, docs/entities.md): a registered locating entity is
written in its unit, whatever zone owns its ZSID, and its rows replicate everywhere."""

from __future__ import annotations

import pytest

from tests.support.replication import alerts, wait_converged
from zonesync.dal import WrongZone
from zonesync.meta import guards
from zonesync.meta.store import MetaStore

pytestmark = pytest.mark.integration


def _orders(inst, tenant: int) -> dict[int, int]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT order_id, amount FROM orders WHERE tenant_id = %s", (tenant,))
        return {int(o): int(a) for o, a in cur.fetchall()}


def test_a_tenant_registered_outside_its_zsids_zone_is_written_there_and_replicated(cluster, guard_env, zones, meta):
    """Tenant 7 (ZSID 7: a's by the rules) registered in b: b's guard writes its orders,
    a's refuses them naming b; its inserts, update and delete reach a and c through the
    appliers' owners check (the entity's unit, by meta's entity_units) with no partition
    halted; tenant 8, not registered, is still a's by its ZSID."""
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")
    version = MetaStore(meta).publish_entities(
        [{"le_type": "tenant", "le_id": 7, "unit_zone": "b", "stop_write": False}], "test: tenant 7 lives in b"
    )
    ga, gb = guard_env("a"), guard_env("b")
    guards.wait_acks(meta, version, {"a", "b"}, 10)
    with gb.transaction() as tx:
        for n in range(20):
            tx.insert("orders", {"order_id": 7000 + n, "tenant_id": 7, "amount": n})
    with gb.transaction() as tx:
        tx.update("orders", {"order_id": 7000}, {"amount": 99})
        tx.delete("orders", {"order_id": 7001})
    with pytest.raises(WrongZone, match="tenant 7 is owned by zone b"):
        with ga.transaction() as tx:
            tx.insert("orders", {"order_id": 7100, "tenant_id": 7, "amount": 1})
    with pytest.raises(WrongZone):
        with gb.transaction() as tx:
            tx.insert("orders", {"order_id": 8001, "tenant_id": 8, "amount": 1})
    with ga.transaction() as tx:
        tx.insert("orders", {"order_id": 8000, "tenant_id": 8, "amount": 1})
    wait_converged(zones, ("orders",), timeout=60)
    expected = {7000: 99, **{7000 + n: n for n in range(2, 20)}}
    for z in ("a", "b", "c"):
        assert _orders(zones[z], 7) == expected, z
        assert _orders(zones[z], 8) == {8000: 1}, z
        assert not alerts(meta, z, "partition_halted"), alerts(meta, z, "partition_halted")
