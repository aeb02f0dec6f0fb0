"""The entity registry and routing (meta/entities.py, routing.py; seed 004 §2 and §4):
a biz entity with its locating entities, one audited version; where() answers the
registry, else the ZSID rules for an entity that a table's ZSID column names, else a
clear "unknown"; answers follow the head version; bad input changes nothing."""

from __future__ import annotations

import pytest

from tests.support.rules import rules_doc
from zonesync import cli
from zonesync.meta.db import MetaError
from zonesync.meta.entities import EntityRegistry
from zonesync.meta.store import MetaStore
from zonesync.routing import Router, Unknown

pytestmark = pytest.mark.integration

BE = ("tenant", "reg-1001")


@pytest.fixture
def registry(meta, zones):
    MetaStore(meta).publish_rules(rules_doc(), "test baseline")
    meta.run("DELETE FROM locating_entities WHERE be_id LIKE 'reg-%%' OR le_id LIKE 'reg-%%'")
    meta.run("DELETE FROM biz_entities WHERE be_id LIKE 'reg-%%'")
    yield EntityRegistry(meta)
    meta.run("DELETE FROM locating_entities WHERE be_id LIKE 'reg-%%' OR le_id LIKE 'reg-%%'")
    meta.run("DELETE FROM biz_entities WHERE be_id LIKE 'reg-%%'")


def test_a_registered_entity_is_routed_to_its_zone_and_follows_a_new_version(registry, meta):
    version = registry.register_biz(*BE, "b", [BE, ("chat", "reg-9001")], "test: onboard")
    biz, les = registry.biz(*BE)
    assert (biz.zone, biz.version) == ("b", version)
    assert [(le.le_type, le.le_id, le.zone) for le in les] == [("chat", "reg-9001", "b"), ("tenant", "reg-1001", "b")]
    clock = [0.0]
    router = Router(meta, poll_s=1.0, clock=lambda: clock[0])
    loc = router.where("chat", "reg-9001")
    assert (loc.zone, loc.version) == ("b", version) and "of tenant reg-1001" in loc.how
    registry.register_biz(*BE, "c", [BE, ("chat", "reg-9001")], "test: moved", status="MIGRATING")
    assert router.where("chat", "reg-9001").zone == "b"  # cached until the next look at the head
    clock[0] += 1.0
    moved = router.where("chat", "reg-9001")
    assert (moved.zone, moved.status) == ("c", "MIGRATING")
    rows, _ = meta.run("SELECT COUNT(*) FROM audit_log WHERE action = 'entities.register' AND version >= %s",
                       (version,))  # fmt: skip
    assert rows[0][0] == 2


def test_an_unregistered_entity_is_routed_by_the_zsid_rules_or_is_unknown(registry, meta):
    router = Router(meta, poll_s=0)
    loc = router.where("tenant", 500)  # tenant_id 500 -> ZSID 500: zone b by the baseline rules
    assert (loc.zone, loc.how) == ("b", "by ZSID rule: orders.tenant_id -> ZSID 500")
    with pytest.raises(Unknown, match="chat reg-404: not registered, and no table of the rules takes its ZSID"):
        router.where("chat", "reg-404")
    with pytest.raises(Unknown, match="tenant_id='abc' is not an integer"):
        router.where("tenant", "abc")


def test_a_locating_entity_has_one_biz_entity_and_bad_input_changes_nothing(registry, meta):
    registry.register_biz(*BE, "a", [("chat", "reg-7")], "test")
    head = registry.head()
    with pytest.raises(MetaError, match="chat reg-7 belongs to tenant reg-1001: a locating entity has one biz"):
        registry.register_biz("tenant", "reg-1002", "a", [("chat", "reg-7")], "test")
    with pytest.raises(MetaError, match="unknown zone 'q'"):
        registry.register_biz("tenant", "reg-1003", "q", [], "test")
    with pytest.raises(MetaError, match="biz entity type 'ten ant' must be a plain name"):
        registry.register_biz("ten ant", "reg-1", "a", [], "test")
    assert registry.head() == head and registry.biz("tenant", "reg-1002") is None


def test_the_cli_registers_shows_lists_and_routes(registry, capsys):
    assert cli.main(["entity", "register", "tenant", "reg-1001", "--zone", "c", "--le", "tenant:reg-1001",
                     "--le", "chat:reg-42", "--reason", "test"]) == 0  # fmt: skip
    assert "registered tenant reg-1001 in zone c with 2 locating entities" in capsys.readouterr().out
    assert cli.main(["entity", "where", "chat", "reg-42"]) == 0
    assert "chat reg-42: zone c (ACTIVE; registered (chat reg-42, of tenant reg-1001)" in capsys.readouterr().out
    assert cli.main(["entity", "show", "chat", "reg-42"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("biz entity tenant reg-1001: zone c") and "  chat reg-42: zone c" in out
    assert cli.main(["entity", "list", "--type", "chat", "--zone", "c"]) == 0
    assert "chat         reg-42" in capsys.readouterr().out
    assert cli.main(["entity", "where", "chat", "reg-nope"]) == 1
    assert capsys.readouterr().out.startswith("unknown: chat reg-nope: not registered")
    assert cli.main(["entity", "register", "tenant", "reg-1", "--zone", "q", "--reason", "test"]) == 2
    assert "unknown zone 'q'" in capsys.readouterr().err
