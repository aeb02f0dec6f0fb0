"""update/delete of a row that is not in the zone asked: 0 only from the ACTIVE owner of a key.

No replication runs here, so a row inserted through its owner's guard is exactly the
row "inserted a moment ago and not yet replicated" everywhere else.
"""

from __future__ import annotations

import pytest

from tests.support.rules import rules_doc
from zonesync.dal import RowNotFoundHere, WriteRefused, WrongZone, ZoneReshardingBlocked
from zonesync.meta import guards
from zonesync.meta.store import MetaStore
from zonesync.rules import parse

pytestmark = pytest.mark.integration

# Extra tables beside the sample schema (tenants: ZSID column = primary key; orders:
# ZSID and entity column tenant_id outside the key order_id).
TABLES = {
    # ZSID and entity column inside a composite key: the key decides
    "tenant_orders": (
        "CREATE TABLE IF NOT EXISTS tenant_orders (tenant_id BIGINT NOT NULL, order_id BIGINT NOT NULL, "
        "amount INT NOT NULL, _zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0, "
        "PRIMARY KEY (tenant_id, order_id))",
        {
            "column": "tenant_id",
            "function": "modulo",
            "buckets": 1024,
            "entity": {"type": "tenant", "column": "tenant_id"},
        },
    ),
    # ZSID column is the key, the entity column is not: the key does not decide the entity
    "accounts": (
        "CREATE TABLE IF NOT EXISTS accounts (tenant_id BIGINT NOT NULL PRIMARY KEY, owner_id BIGINT NOT NULL, "
        "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)",
        {
            "column": "tenant_id",
            "function": "modulo",
            "buckets": 1024,
            "entity": {"type": "owner", "column": "owner_id"},
        },
    ),
}


def count(zones, zone, sql):
    with zones[zone].connect("zonesync_app").cursor() as cur:
        cur.execute(sql)
        return cur.fetchone()[0]


def tombstones(zones, zone):
    return count(zones, zone, "SELECT COUNT(*) FROM zonesync.tombstones")


@pytest.fixture
def extra_tables(guard_env, meta, zones):
    """tenant_orders and accounts, empty, in every zone and declared in the rules."""
    for name in ("a", "b", "c"):
        with zones[name].connect("zonesync_app").cursor() as cur:
            for table, (ddl, _) in TABLES.items():
                cur.execute(ddl)
                cur.execute(f"DELETE FROM {table}")
    doc = rules_doc().to_doc()
    doc["tables"].update({table: spec for table, (_, spec) in TABLES.items()})
    MetaStore(meta).publish_rules(parse(doc), "test tables with and without the ZSID column in the key")
    yield
    for name in ("a", "b", "c"):
        with zones[name].connect("zonesync_app").cursor() as cur:
            for table in TABLES:
                cur.execute(f"DELETE FROM {table}")


def test_key_with_the_zsid_column_routes_before_looking_for_the_row(extra_tables, guard_env, zones):
    ga, gb = guard_env("a"), guard_env("b")
    b_tombstones = tombstones(zones, "b")
    with ga.transaction() as tx:  # ZSID 5 is a's; the row is not (yet) in b
        tx.insert("tenants", {"tenant_id": 5, "name": "five"})
        tx.insert("tenant_orders", {"tenant_id": 5, "order_id": 1, "amount": 1})
    for write in (
        lambda tx: tx.update("tenants", {"tenant_id": 5}, {"name": "x"}),
        lambda tx: tx.update("tenants", {"tenant_id": 5}, {"tenant_id": 405}),  # changes the ZSID column
        lambda tx: tx.update("tenants", {"tenant_id": 6}, {"tenant_id": 406}),  # absent everywhere
        lambda tx: tx.delete("tenants", {"tenant_id": 5}),
        lambda tx: tx.delete("tenants", {"tenant_id": 6}),
        lambda tx: tx.update("tenant_orders", {"tenant_id": 5, "order_id": 1}, {"amount": 2}),
        lambda tx: tx.update("tenant_orders", {"tenant_id": 5, "order_id": 1}, {"tenant_id": 405}),
        lambda tx: tx.delete("tenant_orders", {"tenant_id": 5, "order_id": 1}),
    ):
        with pytest.raises(WrongZone) as err:
            with gb.transaction() as tx:
                write(tx)
        assert err.value.owner == "a" and err.value.zsid in (5, 6)
    assert count(zones, "a", "SELECT COUNT(*) FROM tenants") == 1
    assert count(zones, "b", "SELECT COUNT(*) FROM tenants") == 0
    assert tombstones(zones, "b") == b_tombstones


def test_the_active_owner_answers_0_for_a_truly_absent_key(extra_tables, guard_env, zones):
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 5, "name": "five"})
    with ga.transaction() as tx:
        assert tx.update("tenants", {"tenant_id": 99}, {"name": "none"}) == 0
        assert tx.update("tenants", {"tenant_id": 99}, {"tenant_id": 98}) == 0
        assert tx.delete("tenants", {"tenant_id": 99}) == 0
        assert tx.update("tenant_orders", {"tenant_id": 99, "order_id": 1}, {"tenant_id": 98}) == 0
        assert tx.delete("tenant_orders", {"tenant_id": 99, "order_id": 1}) == 0
        # and a row that is there is still found, moved and deleted
        assert tx.update("tenants", {"tenant_id": 5}, {"tenant_id": 7}) == 1
        assert tx.delete("tenants", {"tenant_id": 7}) == 1
    assert count(zones, "a", "SELECT COUNT(*) FROM tenants") == 0


def test_key_without_the_zsid_column_refuses_an_absent_row(extra_tables, guard_env, zones):
    ga, gb = guard_env("a"), guard_env("b")
    b_tombstones = tombstones(zones, "b")
    with ga.transaction() as tx:  # tenant 17 is ZSID 17, a's; order 1 is not (yet) in b
        tx.insert("orders", {"order_id": 1, "tenant_id": 17, "amount": 1})
    for what, write in (
        ("update", lambda tx: tx.update("orders", {"order_id": 1}, {"amount": 2})),
        ("update", lambda tx: tx.update("orders", {"order_id": 1}, {"tenant_id": 407})),
        ("delete from", lambda tx: tx.delete("orders", {"order_id": 1})),
    ):
        with pytest.raises(RowNotFoundHere) as err:
            with gb.transaction() as tx:
                write(tx)
        message = str(err.value)
        assert "\n" not in message
        assert message.startswith(f"{what} orders order_id=1: no such row in zone b")
        assert "may live in another zone that owns it" in message
        assert "write in the owner zone, or include the ZSID column tenant_id in the primary key" in message
        assert isinstance(err.value, WriteRefused)
        assert (err.value.table, err.value.key, err.value.zone, err.value.missing) == (
            "orders",
            {"order_id": 1},
            "b",
            ["tenant_id"],
        )

    # Caught inside a transaction, the refusal leaves nothing of its own: the rest commits.
    with gb.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 450, "name": "b's"})
        with pytest.raises(RowNotFoundHere):
            tx.delete("orders", {"order_id": 1})
        with pytest.raises(RowNotFoundHere):
            tx.update("orders", {"order_id": 1}, {"amount": 3})
    assert count(zones, "b", "SELECT COUNT(*) FROM tenants") == 1
    assert count(zones, "b", "SELECT COUNT(*) FROM orders") == 0
    assert tombstones(zones, "b") == b_tombstones
    assert count(zones, "a", "SELECT COUNT(*) FROM orders WHERE order_id = 1 AND amount = 1") == 1

    # The owner cannot tell "absent" from "elsewhere" by an order_id either; a present row is fine.
    with pytest.raises(RowNotFoundHere, match="delete from orders order_id=2: no such row in zone a"):
        with ga.transaction() as tx:
            tx.delete("orders", {"order_id": 2})
    with ga.transaction() as tx:
        assert tx.update("orders", {"order_id": 1}, {"amount": 5}) == 1
        assert tx.delete("orders", {"order_id": 1}) == 1


def test_key_without_the_entity_column_refuses_an_absent_row(extra_tables, guard_env, zones):
    ga = guard_env("a")
    with pytest.raises(RowNotFoundHere, match="include the entity column owner_id in the primary key"):
        with ga.transaction() as tx:
            tx.update("accounts", {"tenant_id": 5}, {"owner_id": 1})
    with pytest.raises(RowNotFoundHere, match="delete from accounts tenant_id=5: no such row in zone a"):
        with ga.transaction() as tx:
            tx.delete("accounts", {"tenant_id": 5})
    with ga.transaction() as tx:
        tx.insert("accounts", {"tenant_id": 5, "owner_id": 1})
    with ga.transaction() as tx:
        assert tx.update("accounts", {"tenant_id": 5}, {"owner_id": 2}) == 1
        assert tx.delete("accounts", {"tenant_id": 5}) == 1


def test_an_entity_owned_elsewhere_is_routed_from_the_key(extra_tables, guard_env, meta):
    ga = guard_env("a")
    store = MetaStore(meta)
    version = store.publish_entities([{"le_type": "tenant", "le_id": 27, "unit_zone": "b"}], "tenant 27 to b")
    guards.wait_acks(meta, version, {"a"}, 2)
    try:
        for write in (  # ZSID 27 is a's, tenant 27 is b's
            lambda tx: tx.update("tenant_orders", {"tenant_id": 27, "order_id": 1}, {"amount": 2}),
            lambda tx: tx.update("tenant_orders", {"tenant_id": 27, "order_id": 1}, {"order_id": 2}),
            lambda tx: tx.delete("tenant_orders", {"tenant_id": 27, "order_id": 1}),
        ):
            with pytest.raises(WrongZone, match="tenant 27 is owned by zone b") as err:
                with ga.transaction() as tx:
                    write(tx)
            assert err.value.owner == "b"
    finally:
        store.publish_entities([{"le_type": "tenant", "le_id": 27, "unit_zone": "a"}], "tenant 27 back to a")


@pytest.mark.parametrize("status", ["BLOCK", "RESHARDING"])
def test_a_moving_zsid_is_blocked_even_when_the_row_is_absent(extra_tables, guard_env, meta, zones, status):
    ga, gb = guard_env("a"), guard_env("b")
    a_tombstones = tombstones(zones, "a")
    doc = rules_doc(
        [
            {"zsids": "0-9", "zone": "a" if status == "BLOCK" else "b", "status": status},
            {"zsids": "10-399", "zone": "a"},
            {"zsids": "400-799", "zone": "b"},
            {"zsids": "800-1023", "zone": "c"},
        ]
    ).to_doc()
    doc["tables"].update({table: spec for table, (_, spec) in TABLES.items()})
    guards.push_and_wait(meta, parse(doc), f"{status} 0-9", zones={"a", "b"}, require_writable=False)
    for g in (ga, gb):
        for write in (
            lambda tx: tx.update("tenants", {"tenant_id": 3}, {"name": "x"}),
            lambda tx: tx.update("tenants", {"tenant_id": 3}, {"tenant_id": 13}),
            lambda tx: tx.delete("tenants", {"tenant_id": 3}),
            lambda tx: tx.delete("tenant_orders", {"tenant_id": 3, "order_id": 1}),
        ):
            with pytest.raises(ZoneReshardingBlocked, match=f"Zone resharding block error: ZSID 3 is {status}"):
                with g.transaction() as tx:
                    write(tx)
    with ga.transaction() as tx:  # unmoved ZSIDs still answer 0 in their owner
        assert tx.delete("tenants", {"tenant_id": 13}) == 0
    assert count(zones, "a", "SELECT COUNT(*) FROM tenants") == 0
    assert tombstones(zones, "a") == a_tombstones
