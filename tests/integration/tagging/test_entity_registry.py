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
from zonesync.routing import ForwardRefused, Router, Unknown

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
    registry.register_biz(*BE, "b", [BE, ("chat", "reg-9001")], "test: stopped", status="STOP_WRITE")
    assert not router.where("chat", "reg-9001").stop_write  # cached until the next look at the head
    clock[0] += 1.0
    stopped = router.where("chat", "reg-9001")
    assert (stopped.zone, stopped.status, stopped.stop_write) == ("b", "STOP_WRITE", True)
    rows, _ = meta.run("SELECT COUNT(*) FROM audit_log WHERE action = 'entities.register' AND version >= %s",
                       (version,))  # fmt: skip
    assert rows[0][0] == 2


def test_a_request_is_forwarded_at_most_one_hop_while_two_zones_answers_disagree(registry, meta):
    """S004-02: zone b's router still holds tenant reg-1001 in a (its answer cached) while
    the registry moved it to b. b forwards a request to a, once; a, which knows better,
    refuses to forward it again (no ping-pong), naming the owner; a request a receives
    first goes to b; once b's router looks at the head again, b handles it itself."""
    registry.register_biz(*BE, "a", [BE], "test: in a")
    clock = [0.0]
    in_b, in_a = Router(meta, poll_s=10.0, clock=lambda: clock[0]), Router(meta, poll_s=0)
    assert in_b.route(*BE, here="b") == "a" and in_a.route(*BE, here="a") is None
    registry.register_biz(*BE, "b", [BE], "test: moved (as a migration's flip)", within=lambda cur, version: None)
    assert in_b.route(*BE, here="b") == "a"  # b's cached answer: forwarded to a, once
    with pytest.raises(ForwardRefused, match=r"forwarded to zone a, which answers that zone b owns it: a forwarded "
                       r"request is not forwarded again") as refused:  # fmt: skip
        in_a.route(*BE, here="a", forwarded=True)
    assert refused.value.owner == "b"
    assert in_a.route(*BE, here="a") == "b"  # a request a receives first: to b
    clock[0] += 10.0
    assert in_b.route(*BE, here="b") is None and in_b.route(*BE, here="b", forwarded=True) is None


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


def test_an_operator_registration_never_moves_who_may_write_an_entity(registry, meta):
    """Only a migration moves an LE (it stops its writes and waits for their last data
    first): re-registering one in another zone is refused; so is a new registration
    outside the zone the ZSID rules give its rows, unless it has no rows yet (--new); so is
    any change while a migration of its biz entity runs. Each refusal publishes nothing."""
    registry.register_biz(*BE, "b", [BE, ("chat", "reg-9001")], "test: onboard")
    head = registry.head()
    with pytest.raises(MetaError, match=r"tenant reg-1001 is in zone b: moving it to c is a migration "
                                        r"\(`zonesync migrate --tenant reg-1001 --to c`\)"):  # fmt: skip
        registry.register_biz(*BE, "c", [BE, ("chat", "reg-9001")], "test: moved")
    # tenant 500's orders have ZSID 500: zone b by the baseline rules
    with pytest.raises(MetaError, match="the rules place tenant 500 in zone b, where its rows are written: register "
                                        "it there and migrate it, or pass --new if it has no rows yet"):  # fmt: skip
        registry.register_biz("tenant", "reg-500", "a", [("tenant", "500")], "test")
    assert registry.head() == head and registry.locate("tenant", "500") is None
    with pytest.raises(MetaError, match="register: tenant id '0500' spells the integer 500 another way; register it "
                                        "as 500"):  # fmt: skip
        registry.register_biz("tenant", "reg-500", "b", [("tenant", "0500")], "test", new=True)
    meta.run("INSERT INTO migrations (run_id, be_type, be_id, source_zone, target_zone, mode, les_json, reason, "
             "actor) VALUES ('reg-run', %s, %s, 'b', 'a', 'plan1', '[]', 'test', 'test')", BE)  # fmt: skip
    try:
        with pytest.raises(MetaError, match=r"tenant reg-1001 is being migrated \(reg-run, b -> a\) and has not "
                                            r"flipped yet: wait for the migration"):  # fmt: skip
            registry.register_biz(*BE, "b", [BE], "test: stop it", status="STOP_WRITE")
        with pytest.raises(MetaError, match="a new locating entity can be registered in zone a once the run has "
                                            "flipped"):  # fmt: skip
            registry.register_biz(*BE, "a", [("chat", "reg-9002")], "test: a new chat")
    finally:
        meta.run("DELETE FROM migrations WHERE run_id = 'reg-run'")
    assert registry.head() == head
    registry.register_biz("tenant", "reg-500", "a", [("tenant", "500")], "test: a new tenant", new=True)
    assert registry.locate("tenant", "500").zone == "a"
    meta.run("DELETE FROM locating_entities WHERE le_id = '500'")


def test_past_its_flip_a_running_migration_admits_only_new_entities_in_its_target(registry, meta):
    """S004-31, the registry's rules (a run's row planted as flipped; the steps' test drives
    a real one): a new LE of the migrating biz entity is registered at once in the run's
    target, the biz entity's row left as the run published it; in any other zone, or an
    LE registered already, refused in one line with nothing published."""
    registry.register_biz(*BE, "b", [BE, ("chat", "reg-9001")], "test: onboard")
    biz_before = registry.biz(*BE)[0]
    meta.run("INSERT INTO migrations (run_id, be_type, be_id, source_zone, target_zone, mode, les_json, reason, "
             "actor, phase, flip_version) VALUES ('reg-run', %s, %s, 'b', 'a', 'plan1', '[]', 'test', 'test', "
             "'flipping', 1)", BE)  # fmt: skip
    try:
        head = registry.head()
        refusals = [
            ("c", [("chat", "reg-9002")], r"tenant reg-1001 is being migrated \(reg-run, b -> a\), past its flip: "
                                          "register its new locating entities in zone a, its unit now, not in c"),
            ("b", [("chat", "reg-9002")], "register its new locating entities in zone a, its unit now, not in b"),
            ("a", [("chat", "reg-9002"), ("chat", "reg-9001")], r"chat reg-9001 is registered already \(zone b\); "
                                                                 "only a new locating entity can be registered"),
        ]  # fmt: skip
        for zone, les, words in refusals:
            with pytest.raises(MetaError, match=words) as err:
                registry.register_biz(*BE, zone, les, "test: a new chat")
            assert "\n" not in str(err.value)
        assert registry.head() == head and registry.locate("chat", "reg-9002") is None
        version = registry.register_biz(*BE, "a", [("chat", "reg-9002")], "test: a new chat")
    finally:
        meta.run("DELETE FROM migrations WHERE run_id = 'reg-run'")
    new = registry.locate("chat", "reg-9002")
    assert (new.zone, new.status, new.stop_write, new.version, new.be_id) == ("a", "ACTIVE", False, version, BE[1])
    assert registry.biz(*BE)[0] == biz_before  # the run's to publish (its lift)
    rows, _ = meta.run("SELECT detail FROM audit_log WHERE action = 'entities.register' AND version = %s", (version,))
    assert '"during_migration": "reg-run"' in rows[0][0]


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
