"""update/delete of an absent row: which answer the guard gives, and which SQL it runs first.

A recording connection stands in for the zone; the decision logic is the real GuardState.
"""

from __future__ import annotations

import pytest

from zonesync.dal import RowNotFoundHere, WriteRefused, WrongZone, ZoneReshardingBlocked
from zonesync.dal.hlc import HybridClock
from zonesync.dal.state import GuardState
from zonesync.dal.transaction import Transaction
from zonesync.rules import parse

pytestmark = pytest.mark.unit

RULES = parse(
    {
        "zsid_space": {"min": 0, "max": 9},
        "rules": [
            {"zsids": "0-3", "zone": "a"},
            {"zsids": "4-5", "zone": "b", "status": "BLOCK"},
            {"zsids": "6-9", "zone": "b"},
        ],
        "tables": {
            "tenants": {"column": "tenant", "function": "modulo", "buckets": 10},
            "orders": {"column": "tenant", "function": "modulo", "buckets": 10},
            "lines": {
                "column": "tenant",
                "function": "modulo",
                "buckets": 10,
                "entity": {"type": "t", "column": "tenant"},
            },
            "accounts": {
                "column": "tenant",
                "function": "modulo",
                "buckets": 10,
                "entity": {"type": "owner", "column": "owner"},
            },
        },
    }
)
TABLES = {  # table -> (primary key, columns)
    "tenants": (["tenant"], ["tenant", "name", "_zs_origin", "_zs_version"]),
    "orders": (["order_id"], ["order_id", "tenant", "amount", "_zs_origin", "_zs_version"]),
    "lines": (["tenant", "line"], ["tenant", "line", "amount", "_zs_origin", "_zs_version"]),
    "accounts": (["tenant"], ["tenant", "owner", "_zs_origin", "_zs_version"]),
}


class Cursor:
    """Records the verb of every statement; no row is ever here."""

    def __init__(self, conn):
        self.conn, self.description = conn, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, params=None):
        self.conn.sql.append(sql.split()[0].upper())
        return 0

    def fetchone(self):
        return None


class Conn:
    def __init__(self):
        self.sql: list[str] = []

    def cursor(self):
        return Cursor(self)

    def commit(self):
        self.sql.append("COMMIT")

    def rollback(self):
        self.sql.append("ROLLBACK")


class FakeGuard:
    def __init__(self, zone, entities=None):
        self.zone, self.zone_id = zone, 1
        self.state = GuardState(7, zone, RULES, entities or {})
        self.clock = HybridClock()

    def require_synced(self):
        pass

    def table_meta(self, table):
        return TABLES[table]


def tx(zone="a", entities=None):
    return Transaction(FakeGuard(zone, entities), Conn())


@pytest.mark.parametrize(
    "write",
    [
        lambda t: t.update("tenants", {"tenant": 7}, {"name": "x"}),
        lambda t: t.update("tenants", {"tenant": 7}, {"tenant": 1}),
        lambda t: t.delete("tenants", {"tenant": 7}),
        lambda t: t.update("lines", {"tenant": 7, "line": 1}, {"tenant": 2}),
        lambda t: t.delete("lines", {"tenant": 7, "line": 1}),
    ],
)
def test_key_that_decides_is_routed_before_the_row_is_read(write):
    t = tx("a")
    with pytest.raises(WrongZone) as err:
        write(t)
    assert err.value.owner == "b" and err.value.zsid == 7
    assert t.conn.sql == [], "refused from the key alone, before any SQL"


def test_blocked_zsid_and_entity_elsewhere_are_refused_from_the_key():
    t = tx("b")
    with pytest.raises(ZoneReshardingBlocked, match="ZSID 4 is BLOCK"):
        t.delete("tenants", {"tenant": 4})
    with pytest.raises(ZoneReshardingBlocked, match="ZSID 5 is BLOCK"):
        t.update("tenants", {"tenant": 5}, {"tenant": 6})
    t = tx("a", entities={("t", "2"): ("b", False)})
    with pytest.raises(WrongZone, match="t 2 is owned by zone b"):
        t.delete("lines", {"tenant": 2, "line": 1})
    assert t.conn.sql == []


def test_the_active_owner_answers_0_for_an_absent_key():
    t = tx("a")
    assert t.update("tenants", {"tenant": 1}, {"tenant": 2}) == 0
    assert t.delete("tenants", {"tenant": 1}) == 0
    assert t.delete("lines", {"tenant": 1, "line": 1}) == 0
    assert t.conn.sql == ["SELECT", "SELECT", "SELECT"], "looked for the row, wrote nothing"


@pytest.mark.parametrize("zone", ["a", "b"])
def test_key_that_does_not_decide_refuses_an_absent_row(zone):
    t = tx(zone)
    with pytest.raises(RowNotFoundHere) as err:
        t.update("orders", {"order_id": 42}, {"amount": 1})
    message = str(err.value)
    assert message == (
        f"update orders order_id=42: no such row in zone {zone}, but the key does not decide its ZSID, so the row "
        "may live in another zone that owns it (not replicated here yet); refused rather than answering 0 - write "
        "in the owner zone, or include the ZSID column tenant in the primary key so the guard can route it "
        "(rules v7)"
    )
    assert isinstance(err.value, WriteRefused)
    with pytest.raises(RowNotFoundHere, match=r"^delete from orders order_id=42: no such row"):
        t.delete("orders", {"order_id": 42})
    with pytest.raises(RowNotFoundHere, match="include the entity column owner in the primary key"):
        t.delete("accounts", {"tenant": 1})
    assert t.conn.sql == ["SELECT", "SELECT", "SELECT"], "nothing written"
    assert t.touched == []
