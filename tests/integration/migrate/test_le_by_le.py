"""A biz entity moved LE by LE (S004-30; docs/migration.md, "LE by LE"): a run may name
some of the tenant's locating entities; only those stop and move, as one atomic run, while
the others stay writable where they are; the history says where each one is and which run
moved it."""

from __future__ import annotations

import pytest

from tests.support.background import wait_until
from zonesync import cli
from zonesync.dal import EntityWriteStopped, WrongZone
from zonesync.meta import guards
from zonesync.meta.entities import EntityRegistry
from zonesync.migrate import steps
from zonesync.migrate.request import MigrationRefused, MigrationRequest

pytestmark = pytest.mark.integration

LES = [("tenant", "7"), ("chat", "70"), ("chat", "71")]


@pytest.fixture
def tenant7(meta):
    """Tenant 7 with its tenant LE and chats 70 and 71, registered in a."""
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
    meta.run("DELETE FROM migrations")
    EntityRegistry(meta).register_biz("tenant", "7", "a", LES, "test: tenant 7 in a")
    yield
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")


def _ctx(zones, meta, run_id: str, les=(), to: str = "b") -> steps.MigrationContext:
    request = MigrationRequest("tenant", "7", to, "plan1", "test: LE by LE", tuple(les))
    return steps.MigrationContext(meta, run_id, request, lambda z: zones[z].connect("zonesync_app"), actor="test")


def _cut_over(ctx) -> None:
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    steps.final_check(ctx)
    steps.flip(ctx)
    assert steps.lift(ctx).status == "succeeded"


def _zones(meta) -> tuple[str, dict]:
    """(the tenant's own zone and status, {LE: (zone, stopped)})."""
    biz, les = EntityRegistry(meta).biz("tenant", "7")
    return f"{biz.zone} {biz.status}", {(le.le_type, le.le_id): (le.zone, le.stop_write) for le in les}


def _order(guard, order_id: int) -> None:
    with guard.transaction() as tx:
        tx.insert("orders", {"order_id": order_id, "tenant_id": 7, "amount": 1})


def test_a_tenant_moves_le_by_le_each_run_atomic_and_the_history_says_which_moved(
    cluster, guard_env, zones, meta, tenant7, capsys
):
    ga, gb = guard_env("a"), guard_env("b")
    # run 1: chat 70 alone; tenant 7 and chat 71 are never stopped, tenant 7's orders go on in a
    one = _ctx(zones, meta, "chat70-b", les=[("chat", "70")])
    assert [tuple(le) for le in steps.preflight(one).les] == [("chat", "70")]
    # no table declares chats: the verify's check has nothing to compare, and is skipped
    assert steps.verify_start(one)["tables"] == ""
    assert steps.verify(one, None)["skipped"] == "no table the check compares declares the LEs' types"
    version = steps.stop_write(one).stop_version
    guards.wait_acks(meta, version, {"a", "b"}, 10)
    assert cli.main(["entity", "show", "tenant", "7"]) == 0  # the LE's lock while it moves: its run
    shown = capsys.readouterr().out
    (line,) = [x for x in shown.splitlines() if x.startswith("  chat 70:")]
    assert line.startswith("  chat 70: zone a, STOP_WRITE (writes stopped)"), shown
    assert line.endswith("; migrating to b (chat70-b, stopped)") and shown.count("migrating to") == 1, shown
    assert shown.startswith("biz entity tenant 7: zone a, ACTIVE"), shown  # the tenant is not stopped: its LEs go on
    with pytest.raises(EntityWriteStopped):
        ga.state.decide_entity("chat", "70")
    assert ga.state.decide_entity("chat", "71").entity == ("chat", "71")
    _order(ga, 1)  # the tenant LE writes on while chat 70 is stopped
    _cut_over(one)
    assert _zones(meta) == ("a ACTIVE", {("tenant", "7"): ("a", False), ("chat", "70"): ("b", False),
                                  ("chat", "71"): ("a", False)})  # fmt: skip
    guards.wait_acks(meta, EntityRegistry(meta).head(), {"a", "b"}, 10)
    assert gb.state.decide_entity("chat", "70").entity == ("chat", "70")
    with pytest.raises(WrongZone, match="owned by zone b"):
        ga.state.decide_entity("chat", "70")
    _order(ga, 2)

    # the whole tenant cannot be asked for now: it is split; requests naming LEs are checked
    whole = MigrationRequest("tenant", "7", "b", "plan1", "test")
    with pytest.raises(MigrationRefused, match=r"chat 70 \(b\).*name the ones to move \(les, `--le TYPE:ID`\)"):
        steps.movable(meta, whole)
    for les, words in [((("chat", "99"),), "les: chat 99 not tenant 7's"),
                       ((("chat", "70"), ("chat", "71")), "les: the locating entities of one run move from one zone"),
                       ((("chat", "70"),), "les: chat 70 in zone b already"),
                       ((("chat", "71"), ("chat", "71")), "les: a locating entity is named twice")]:  # fmt: skip
        with pytest.raises(MigrationRefused, match=words):
            steps.movable(meta, MigrationRequest("tenant", "7", "b", "plan1", "test", les))

    # run 2: chat 71, rolled back after its stop: all of it stays in a, writable (atomic)
    two = _ctx(zones, meta, "chat71-b", les=[("chat", "71")])
    steps.preflight(two)
    steps.stop_write(two)
    steps.rollback(two, "test: a step failed")
    assert _zones(meta)[0] == "a ACTIVE" and _zones(meta)[1][("chat", "71")] == ("a", False)
    guards.wait_acks(meta, EntityRegistry(meta).head(), {"a", "b"}, 10)
    assert ga.state.decide_entity("chat", "71").entity == ("chat", "71")

    # run 3: the rest, together; then the tenant is in b whole, its own row too
    three = _ctx(zones, meta, "rest-b", les=[("tenant", "7"), ("chat", "71")])
    steps.preflight(three)
    steps.stop_write(three)
    _cut_over(three)
    assert _zones(meta) == ("b ACTIVE", {le: ("b", False) for le in LES})
    assert cli.main(["migrations", "--tenant", "7"]) == 0
    out = capsys.readouterr().out
    for line in ("tenant 7 (zone b), its locating entities:", "chat 70: zone b, moved by chat70-b",
                 "chat 71: zone b, moved by rest-b", "tenant 7: zone b, moved by rest-b"):  # fmt: skip
        assert line in out, out
    assert "rolled_back" in out and "chat71-b" in out
