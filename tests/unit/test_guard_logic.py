"""The guard's pure parts: ZSID extraction, the per-row decision, the clock, the lock."""

from __future__ import annotations

import re
import threading
import time
from decimal import Decimal

import pytest

from zonesync.dal.errors import EntityWriteStopped, WrongZone, ZoneReshardingBlocked, ZsidUndetermined
from zonesync.dal.hlc import HybridClock
from zonesync.dal.rwlock import RWLock
from zonesync.dal.state import GuardState, integer_text
from zonesync.rules import parse

pytestmark = pytest.mark.unit

RULES = parse(
    {
        "zsid_space": {"min": 0, "max": 9},
        "rules": [
            {"zsids": "0-3", "zone": "a"},
            {"zsids": "4-5", "zone": "b", "status": "BLOCK"},
            {"zsids": "6-7", "zone": "b", "status": "RESHARDING"},
            {"zsids": "8-9", "zone": "b"},
        ],
        "tables": {
            "orders": {
                "column": "tenant",
                "function": "modulo",
                "buckets": 10,
                "entity": {"type": "t", "column": "tenant"},
            },
            "regions": {"column": "code", "function": "map", "map": {"cn": 1, "us": 9}},
            "events": {"column": "id", "function": "range", "ranges": [{"lo": 0, "hi": 99, "zsid": 2}]},
        },
    }
)


def state(zone="a", entities=None):
    return GuardState(7, zone, RULES, entities or {})


def test_owner_active_is_allowed_everything_else_refused():
    assert state().decide("orders", {"tenant": 12}).zsid == 2
    with pytest.raises(ZoneReshardingBlocked, match="Zone resharding block error: ZSID 4 is BLOCK"):
        state().decide("orders", {"tenant": 4})
    with pytest.raises(ZoneReshardingBlocked, match="RESHARDING"):
        state("b").decide("orders", {"tenant": 7})
    with pytest.raises(WrongZone) as err:
        state().decide("orders", {"tenant": 9})
    assert err.value.owner == "b"


@pytest.mark.parametrize(
    "table, row, words",
    [
        ("nope", {"x": 1}, "has no ZSID rule"),
        ("orders", {"amount": 1}, "no value for tenant"),
        ("orders", {"tenant": "abc"}, "not an integer"),
        ("regions", {"code": "fr"}, "not in the table's ZSID map"),
        ("events", {"id": 100}, "none of the table's ZSID ranges"),
    ],
)
def test_undeterminable_zsid_is_refused(table, row, words):
    with pytest.raises(ZsidUndetermined, match=words):
        state().decide(table, row)


def test_map_and_range_extraction():
    assert state().decide("regions", {"code": "cn"}).zsid == 1
    assert state().decide("events", {"id": 50}).zsid == 2
    with pytest.raises(WrongZone):
        state().decide("regions", {"code": "us"})


def test_entity_flags():
    flags = {("t", "12"): ("a", True), ("t", "22"): ("b", False)}
    with pytest.raises(EntityWriteStopped, match="t 12 are stopped"):
        state(entities=flags).decide("orders", {"tenant": 12})
    with pytest.raises(WrongZone, match="t 22 is owned by zone b"):
        state(entities=flags).decide("orders", {"tenant": 22})
    assert state(entities=flags).decide("orders", {"tenant": 32}).entity == ("t", "32")


def test_a_registered_entitys_unit_decides_its_rows_over_its_zsids_owner():
    """Owner precedence (docs/migration.md): tenant 22's ZSID 2 is a's, but it is registered
    in b: b writes its rows, a refuses them naming b; tenant 14's ZSID 4 is BLOCKed by a
    switch, but it is registered in a: a writes it; unregistered tenants follow their ZSID."""
    flags = {("t", "22"): ("b", False), ("t", "14"): ("a", False)}
    assert state("b", flags).decide("orders", {"tenant": 22}).entity == ("t", "22")
    with pytest.raises(WrongZone, match="t 22 is owned by zone b"):
        state("a", flags).decide("orders", {"tenant": 22})
    assert state("a", flags).decide("orders", {"tenant": 14}).zsid == 4
    with pytest.raises(ZoneReshardingBlocked, match="ZSID 4 is BLOCK"):
        state("a", flags).decide("orders", {"tenant": 24})
    with pytest.raises(WrongZone):
        state("b", flags).decide("orders", {"tenant": 32})


def test_a_resident_tables_row_needs_a_registered_entity():
    """notes is resident: tenant 22 (registered in b) is written in b only; tenant 12,
    unregistered, has no unit to hold its rows, whatever zone owns its ZSID."""
    doc = RULES.to_doc()
    doc["tables"]["notes"] = {**doc["tables"]["orders"], "resident": True}
    flags = {("t", "22"): ("b", False)}
    assert GuardState(7, "b", parse(doc), flags).decide("notes", {"tenant": 22}).entity == ("t", "22")
    with pytest.raises(WrongZone, match="t 22 is owned by zone b"):
        GuardState(7, "a", parse(doc), flags).decide("notes", {"tenant": 22})
    with pytest.raises(ZsidUndetermined, match="table notes is resident: t 12 is not a registered entity"):
        GuardState(7, "a", parse(doc), flags).decide("notes", {"tenant": 12})
    assert GuardState(7, "a", parse(doc), flags).decide("orders", {"tenant": 12}).zsid == 2  # not resident


def test_a_registered_integer_id_spelled_another_way_is_refused_not_judged_by_its_zsid():
    """Tenant 22 registered in b (its ZSID 2 is a's): '022', ' 22', '+22', 22.0 would land in
    an INT column as tenant 22's row, and judged by the ZSID alone a would accept them.
    Refused in every zone, naming the canonical id; an unregistered id spelled oddly still
    follows its ZSID; the same for a KV key's entity."""
    flags = {("t", "22"): ("b", False)}
    for odd in ("022", " 22", "+22", 22.0, Decimal("22.00")):
        for zone in ("a", "b"):
            with pytest.raises(ZsidUndetermined, match=f"t id {re.escape(repr(odd))} spells the registered t 22 "):
                state(zone, flags).decide("orders", {"tenant": odd})
    assert state("b", flags).decide("orders", {"tenant": 22}).entity == ("t", "22")
    assert state("a", flags).decide("orders", {"tenant": "012"}).zsid == 2  # unregistered: its ZSID decides
    with pytest.raises(ZsidUndetermined, match="spells the registered t 22"):
        state("a", flags).decide_entity("t", "022")
    assert [integer_text(v) for v in (7, "07", " -7 ", "7a", "", 7.5, True, b"08")] == ["7", "7", "-7", None, None,
                                                                                         None, None, "8"]  # fmt: skip


def test_no_rules_means_nothing_is_writable():
    with pytest.raises(ZsidUndetermined, match="no rules published"):
        GuardState(0, "a", None).decide("orders", {"tenant": 1})


def test_hybrid_clock_strictly_increases_when_wall_clock_goes_back():
    wall = iter([1_000_000, 999_000, 999_000, 2_000_000, 3_000_000])
    clock = HybridClock(now_us=lambda: next(wall))
    values = [clock.tick() for _ in range(4)]
    assert values == [1_000_000, 1_000_001, 1_000_002, 2_000_000]
    clock.observe(5_000_000)
    assert clock.tick() == 5_000_001


def test_rwlock_exclusive_waits_for_shared_and_blocks_new_ones():
    lock = RWLock()
    order = []
    release = threading.Event()

    def reader(name):
        with lock.shared():
            order.append(f"{name}+")
            release.wait(2)
            order.append(f"{name}-")

    t1 = threading.Thread(target=reader, args=("r1",))
    t1.start()
    time.sleep(0.05)

    def writer():
        with lock.exclusive():
            order.append("w")

    tw = threading.Thread(target=writer)
    tw.start()
    time.sleep(0.05)
    t2 = threading.Thread(target=reader, args=("r2",))  # arrives while the writer waits
    t2.start()
    time.sleep(0.05)
    release.set()
    for t in (t1, tw, t2):
        t.join(2)
    assert order.index("r1-") < order.index("w") < order.index("r2+")
