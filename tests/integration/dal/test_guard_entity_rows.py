"""S004-17: a write of an LE's rows that does not name the entity still meets the guard.

The guard finds the entity of every row it writes, whatever the statement says: an
update or delete addressed by the primary key alone reads the row FOR UPDATE (its
committed entity, locked) and judges that; a row without its entity column, in a table
whose entity column is not its ZSID column, is refused rather than judged by its ZSID.
No replication runs here: each zone's tables hold what its guard wrote.
"""

from __future__ import annotations

import pytest

from tests.support.rules import rules_doc
from zonesync.dal import EntityWriteStopped, ZsidUndetermined
from zonesync.meta import guards
from zonesync.meta.store import MetaStore
from zonesync.rules import parse

pytestmark = pytest.mark.integration

# memberships: the ZSID column is the key (member_id), the entity column (tenant_id) is
# another one, and nullable: the database would take a row without it
MEMBERSHIPS = (
    "CREATE TABLE IF NOT EXISTS memberships (member_id BIGINT NOT NULL PRIMARY KEY, tenant_id BIGINT NULL, "
    "role VARCHAR(16) NOT NULL DEFAULT 'member', _zs_origin SMALLINT NOT NULL DEFAULT 0, "
    "_zs_version BIGINT NOT NULL DEFAULT 0)"
)
MEMBERSHIPS_RULE = {
    "column": "member_id",
    "function": "modulo",
    "buckets": 1024,
    "entity": {"type": "tenant", "column": "tenant_id"},
}


def table(zones, name: str, zone: str = "a") -> tuple:
    """Every row of `name` in `zone`, every column (versions included), in key order."""
    with zones[zone].connect("zonesync_app").cursor() as cur:
        cur.execute(f"SELECT * FROM {name} ORDER BY 1")
        return cur.fetchall()


def tombstones(zones, zone: str = "a") -> tuple:
    with zones[zone].connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT table_name, pk, version FROM zonesync.tombstones ORDER BY table_name, pk")
        return cur.fetchall()


@pytest.fixture
def tenants_7_and_8(guard_env, meta):
    """Zone a's guard; tenant 7 registered in a and stopped (being migrated), tenant 8 in a
    and writable (both ZSIDs are a's too); memberships declared with its entity."""
    doc = rules_doc().to_doc()
    doc["tables"]["memberships"] = MEMBERSHIPS_RULE
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")
    store = MetaStore(meta)
    store.publish_rules(parse(doc), "memberships: entity column apart from its ZSID column")
    ga = guard_env("a")
    yield ga, store
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")


def stop_7(meta, store):
    version = store.publish_entities(
        [
            {"le_type": "tenant", "le_id": 7, "unit_zone": "a", "stop_write": True},
            {"le_type": "tenant", "le_id": 8, "unit_zone": "a", "stop_write": False},
        ],
        "tenant 7 stopped for its migration",
    )
    guards.wait_acks(meta, version, {"a"}, 5)


def test_an_update_or_delete_by_primary_key_alone_is_judged_by_the_rows_entity(tenants_7_and_8, meta, zones):
    """orders is keyed by order_id; its ZSID and entity column, tenant_id, is not in the key.
    With tenant 7 stopped, its order addressed by order_id alone is neither updated nor
    deleted (EntityWriteStopped, read from the row), nor moved to tenant 8, and no order is
    moved into tenant 7; tenant 8's orders, addressed the same way, are. The entity is read
    with a locking read, not from the transaction's snapshot: an order that became tenant
    7's after the snapshot was taken is refused, though the snapshot still says tenant 8."""
    ga, store = tenants_7_and_8
    with ga.transaction() as tx:
        for order_id, tenant in ((71, 7), (81, 8), (82, 8)):
            tx.insert("orders", {"order_id": order_id, "tenant_id": tenant, "amount": 1})
    stop_7(meta, store)
    before, graves = table(zones, "orders"), tombstones(zones)
    for write in (
        lambda tx: tx.update("orders", {"order_id": 71}, {"amount": 5}),
        lambda tx: tx.update("orders", {"order_id": 71}, {"status": "paid"}),
        lambda tx: tx.delete("orders", {"order_id": 71}),
        lambda tx: tx.update("orders", {"order_id": 71}, {"tenant_id": 8}),  # out of the stopped tenant
        lambda tx: tx.update("orders", {"order_id": 81}, {"tenant_id": 7}),  # into it
    ):
        with pytest.raises(EntityWriteStopped, match="writes to tenant 7 are stopped"):
            with ga.transaction() as tx:
                write(tx)
        assert table(zones, "orders") == before and tombstones(zones) == graves

    with ga.transaction() as tx:  # tenant 8's order, by its key alone, goes through
        assert tx.update("orders", {"order_id": 81}, {"amount": 9}) == 1
    with ga.transaction() as tx:
        assert tx.delete("orders", {"order_id": 81}) == 1
    assert [(r[0], r[1], int(r[2])) for r in table(zones, "orders")] == [(71, 7, 1), (82, 8, 1)]
    assert len(tombstones(zones)) == len(graves) + 1  # 81's

    other = zones["a"].connect("zonesync_app")  # another session, not the guard's
    try:
        for write in (
            lambda tx: tx.update("orders", {"order_id": 82}, {"amount": 7}),
            lambda tx: tx.delete("orders", {"order_id": 82}),
        ):
            with pytest.raises(EntityWriteStopped, match="writes to tenant 7 are stopped"):
                with ga.transaction() as tx:
                    assert tx.query("SELECT tenant_id FROM orders WHERE order_id = 82") == [(8,)]
                    with other.cursor() as cur:
                        cur.execute("UPDATE orders SET tenant_id = 7 WHERE order_id = 82")
                    other.commit()
                    # the snapshot still says tenant 8; the guard reads the row as committed
                    assert tx.query("SELECT tenant_id FROM orders WHERE order_id = 82") == [(8,)]
                    write(tx)
            with other.cursor() as cur:
                cur.execute("UPDATE orders SET tenant_id = 8 WHERE order_id = 82")
            other.commit()
    finally:
        other.close()
    assert [(r[0], r[1], int(r[2])) for r in table(zones, "orders")] == [(71, 7, 1), (82, 8, 1)]
    assert len(tombstones(zones)) == len(graves) + 1


def test_a_row_without_its_entity_column_is_refused_not_judged_by_its_zsid(tenants_7_and_8, meta, zones):
    """memberships: member_id is the key and the ZSID column, tenant_id the entity column
    (nullable). ZSID 5 and 6 are zone a's, but a row that does not say its tenant could be
    stopped tenant 7's: an insert without tenant_id (or with NULL), an update that clears
    it, and an update or delete of a row that has none (written before the table declared
    its entity) are refused, naming the entity column; nothing changes."""
    ga, store = tenants_7_and_8
    with zones["a"].connect("zonesync_app").cursor() as cur:
        cur.execute(MEMBERSHIPS)
        cur.execute("DELETE FROM memberships")
        cur.execute("INSERT INTO memberships (member_id, tenant_id) VALUES (6, NULL)")  # behind the guard's back
    try:
        with ga.transaction() as tx:
            tx.insert("memberships", {"member_id": 5, "tenant_id": 8})
        stop_7(meta, store)
        before, graves = table(zones, "memberships"), tombstones(zones)
        for write in (
            lambda tx: tx.insert("memberships", {"member_id": 7, "role": "owner"}),
            lambda tx: tx.insert("memberships", {"member_id": 7, "tenant_id": None}),
            lambda tx: tx.update("memberships", {"member_id": 5}, {"tenant_id": None}),
            lambda tx: tx.update("memberships", {"member_id": 6}, {"role": "owner"}),
            lambda tx: tx.delete("memberships", {"member_id": 6}),
        ):
            with pytest.raises(ZsidUndetermined) as err:
                with ga.transaction() as tx:
                    write(tx)
            assert str(err.value) == "table memberships: the row has no tenant_id, its entity column"
            assert table(zones, "memberships") == before and tombstones(zones) == graves

        with pytest.raises(EntityWriteStopped, match="tenant 7"):  # naming it is judged by it
            with ga.transaction() as tx:
                tx.insert("memberships", {"member_id": 7, "tenant_id": 7})
        with ga.transaction() as tx:  # and tenant 8's rows are written as usual
            tx.insert("memberships", {"member_id": 9, "tenant_id": 8})
            assert tx.update("memberships", {"member_id": 5}, {"role": "owner"}) == 1
        assert [r[:3] for r in table(zones, "memberships")] == [(5, 8, "owner"), (6, None, "member"), (9, 8, "member")]
    finally:
        with zones["a"].connect("zonesync_app").cursor() as cur:
            cur.execute("DELETE FROM memberships")
