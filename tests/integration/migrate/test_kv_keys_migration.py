"""A migration moves its tenant's KV keys (migrate/kv_keys.py; docs/migration.md, "KV
keys"): bulk copy in admit while the tenant writes through the KV guard, the keys changed
since caught up and compared inside the stop-write window, the source's copies deleted
by release (tagged deleted there); a difference fails the final check and the rollback
removes the target's copies only."""

from __future__ import annotations

import os
import re
import signal
import threading

import pytest

from tests.support import migration_process
from tests.support.background import wait_until
from tests.support.kv_rules import with_chat_cache
from zonesync import cli
from zonesync.dal.errors import EntityWriteStopped, WrongZone
from zonesync.dal.kv import KvGuard
from zonesync.meta import guards
from zonesync.meta.entities import EntityRegistry
from zonesync.meta.store import MetaStore
from zonesync.migrate import resident, steps
from zonesync.migrate.request import MigrationRefused, MigrationRequest
from zonesync.runtime.kv_endpoint import kv_endpoint
from zonesync.tagging import kv_tagger
from zonesync.tagging.rules import TagRules, parse
from zonesync.tagging.tag_store import KV_TABLE, TagStore

pytestmark = pytest.mark.integration

RULES = with_chat_cache()
REPOS = {"sessions": 0, "chat_cache": 1}


def _clear(zones, kv_stores) -> None:
    for zone, inst in kv_stores.items():
        for db in REPOS.values():
            inst.client(db).flushdb()
        with zones[zone].connect() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync.tag_segments WHERE repo IN ('sessions', 'chat_cache')")
            cur.execute("DELETE FROM zonesync.tag_kv_state")
            conn.commit()


def _forget(meta) -> None:
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
    meta.run("DELETE FROM biz_entities WHERE be_type = 'tenant' AND be_id <> '7'")


@pytest.fixture
def kv_tenants(zones, meta, kv_stores, guard_env):
    """KV tag rules for sessions and chat_cache; tenants 7 and 8 registered in a, 407 in b;
    the zones' KV repos and KV tags empty; the tag rules found restored afterwards (other
    tests' migrations move no KV key)."""
    before = MetaStore(meta).tags_at()
    _forget(meta)
    MetaStore(meta).publish_tags(parse(RULES), "test: KV patterns of tenants")
    _clear(zones, kv_stores)
    for tenant, zone in (("7", "a"), ("8", "a"), ("407", "b")):
        EntityRegistry(meta).register_biz("tenant", tenant, zone, [("tenant", tenant)], f"test: {tenant} in {zone}")
    yield guard_env
    _forget(meta)
    _clear(zones, kv_stores)
    MetaStore(meta).publish_tags(before[1] if before else TagRules(), "test: tag rules as before")


def _kv(guard_env, zone: str) -> KvGuard:
    kv = KvGuard(guard_env(zone), kv_endpoint(zone))
    head = EntityRegistry(kv.guard.meta).head()
    wait_until(lambda: kv.guard.state.version >= head, 10, f"{zone}'s guard runs the tag rules")
    return kv


def _seed(kv_a: KvGuard, kv_b: KvGuard) -> None:
    """Tenant 7's keys in a (half of its sessions expiring), tenant 8's in a, 407's in b."""
    for i in range(30):
        kv_a.set("sessions", f"prod:session:7:s{i}", f"v{i}", ttl_s=3600 if i % 2 else None)
    kv_a.set("sessions", "prod:session:7:stable", b"\x00binary\xff")
    kv_a.set("sessions", "last_order:7", "71")
    for i in range(20):
        kv_a.set("chat_cache", f"chat:7:{i}", f"msg {i}", ttl_s=7200 if i % 3 == 0 else None)
    for i in range(5):
        kv_a.set("sessions", f"prod:session:8:s{i}", f"eight {i}")
        kv_b.set("sessions", f"prod:session:407:s{i}", f"b's {i}", ttl_s=3600)
        kv_b.set("chat_cache", f"chat:407:{i}", f"b's msg {i}")


def _keys(kv_stores, zone: str, tenant: str) -> dict[tuple[str, str], tuple[bytes, bool]]:
    """(repo, key) -> (value, expires) of the tenant's keys in the zone's KV store."""
    out = {}
    for repo, db in REPOS.items():
        client = kv_stores[zone].client(db)
        for match in (f"prod:session:{tenant}:*", f"last_order:{tenant}", f"chat:{tenant}:*"):
            for key in client.scan_iter(match=match):
                out[(repo, key.decode())] = (client.get(key), client.pttl(key) > 0)
    return out


class KeyWriter:
    """Tenant 7's keys changed through a's KV guard until the stop-write refuses it:
    overwrites (with and without a TTL, a TTL dropped), deletes and new keys."""

    def __init__(self, kv: KvGuard):
        self.kv, self.n, self.refused = kv, 0, None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            n = self.n
            try:
                if n % 5 == 0:
                    self.kv.delete("sessions", f"prod:session:7:s{n % 30}")
                elif n % 5 == 1:
                    self.kv.set("chat_cache", f"chat:7:{n % 25}", f"w{n}", ttl_s=600 if n % 2 else None)
                elif n % 5 == 2:
                    self.kv.set("sessions", f"prod:session:7:new{n}", f"new {n}", ttl_s=900)
                elif n % 5 == 3:
                    self.kv.delete("chat_cache", f"chat:7:{(n * 7) % 20}")
                else:
                    self.kv.set("sessions", f"prod:session:7:s{n % 30}", f"w{n}")
            except (WrongZone, EntityWriteStopped) as exc:
                self.refused = exc
                return
            self.n = n + 1


def _ctx(zones, meta, run_id: str, mode: str = "plan1") -> steps.MigrationContext:
    return steps.MigrationContext(meta, run_id, MigrationRequest("tenant", "7", "b", mode, "test"),
                                  lambda z: zones[z].connect("zonesync_app"), actor="test", max_txn_ms=200)  # fmt: skip


def _cut_over(ctx) -> None:
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")


def _tagged(meta, zones, zone: str) -> None:
    """The zone's KV tagger run until every repo's log is tagged."""
    tagger = kv_tagger.KvTagger(zone, kv_endpoint(zone), zones[zone].connect, meta)
    thread = threading.Thread(target=tagger.run, kwargs={"max_seconds": 60}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: kv_tagger.caught_up(kv_endpoint(zone), zones[zone].connect), 30, f"{zone} tagged")
    finally:
        tagger.stop()
        thread.join(10)


def test_a_tenant_s_keys_move_with_it_while_it_writes_and_leave_the_source(
    kv_tenants, cluster, zones, meta, kv_stores, capsys
):
    """Tenant 7's 52 keys in two repos move a -> b (plan1) while a writer sets, deletes and
    creates its keys through a's KV guard during the bulk copy (a's KV tagger tagging and
    trimming the log meanwhile): b holds exactly a's keys at the stop, with their values
    and TTLs; after release a holds none (its tags say deleted), tenants 8 and 407 are
    untouched, b's tags list tenant 7's keys, and the tenant writes in b only."""
    kv_a, kv_b = _kv(kv_tenants, "a"), _kv(kv_tenants, "b")
    _seed(kv_a, kv_b)
    others = {z: {**_keys(kv_stores, z, "8"), **_keys(kv_stores, z, "407")} for z in ("a", "b")}
    tagger = kv_tagger.KvTagger("a", kv_endpoint("a"), zones["a"].connect, meta)
    tagging = threading.Thread(target=tagger.run, kwargs={"max_seconds": 120}, daemon=True)
    tagging.start()
    writer = KeyWriter(kv_a)
    writer.thread.start()
    ctx = _ctx(zones, meta, "kv-7")
    try:
        wait_until(lambda: writer.n >= 50 or writer.refused, 20, "a writes tenant 7's keys")
        steps.preflight(ctx)
        assert steps.admit(ctx)["tables"] == ""  # the bulk copy (no resident table here)
        copied = writer.n
        wait_until(lambda: writer.n >= copied + 100 or writer.refused, 20, "writes after the bulk copy")
        steps.verify_keys(ctx)  # every key compared while written: the window compares only later ones
        looked = writer.n
        wait_until(lambda: writer.n >= looked + 100 or writer.refused, 20, "writes after verify")
        assert writer.refused is None, writer.refused
        steps.stop_write(ctx)
        writer.thread.join(30)
        assert isinstance(writer.refused, EntityWriteStopped)
        at_stop = _keys(kv_stores, "a", "7")
        _cut_over(ctx)
        steps.final_check(ctx)
        steps.flip(ctx)
        run = steps.lift(ctx)
    finally:
        writer.stopped.set()
        writer.thread.join(30)
        tagger.stop()
        tagging.join(10)
    assert run.status == "succeeded" and "KV keys moved: chat_cache " in run.detail, run.detail
    moved = {repo: (int(bulk), int(caught)) for repo, bulk, caught in
             re.findall(r"(\w+) (\d+) \((\d+) caught up in the window\)", run.detail)}  # fmt: skip
    assert set(moved) == set(REPOS) and all(b > 0 and c > 0 for b, c in moved.values()), run.detail
    for repo, db in REPOS.items():  # the window compared the keys written since verify, not all of them
        state = kv_stores["b"].client(db).hgetall("zonesync:migration:kv-7")
        assert 0 < int(state[b"window_compared"]) < int(state[b"compared_keys"]), (repo, state)
    assert len(at_stop) > 40 and any(exp for _, exp in at_stop.values()) and not all(
        exp for _, exp in at_stop.values())  # fmt: skip
    assert _keys(kv_stores, "b", "7") == at_stop  # values, and which expire (TTL kept: > 0)
    assert sum(1 for (repo, _) in at_stop if repo == "chat_cache") > 5
    purged = steps.release(ctx)
    assert purged == {"kv:chat_cache": sum(r == "chat_cache" for r, _ in at_stop),
                      "kv:sessions": sum(r == "sessions" for r, _ in at_stop)}, purged  # fmt: skip
    assert _keys(kv_stores, "a", "7") == {} and _keys(kv_stores, "b", "7") == at_stop
    for z in ("a", "b"):
        assert {**_keys(kv_stores, z, "8"), **_keys(kv_stores, z, "407")} == others[z]
    _tagged(meta, zones, "a")
    for repo in REPOS:  # a's tags: every key tenant 7 ever had there, deleted
        entries = TagStore(lambda: zones["a"].connect("zonesync_app"), repo).entries_of("tenant", "7", KV_TABLE)
        assert entries and all(packed & 1 for packed in entries.values()), repo
    assert cli.main(["entity", "rows", "tenant", "7", "--zone", "a", "--keys"]) == 0
    assert "tenant 7 in zone a: 0 KV key(s)" in capsys.readouterr().out
    _tagged(meta, zones, "b")  # b's tags find the keys (a later migration moves them on)
    assert cli.main(["entity", "rows", "tenant", "7", "--zone", "b"]) == 0
    assert f"tenant 7 in zone b: {len(at_stop)} KV key(s)" in capsys.readouterr().out
    guards.wait_acks(meta, run.lift_version, {"a", "b"}, 10)
    kv_b.set("sessions", "last_order:7", "after")
    with pytest.raises(WrongZone):
        kv_a.set("sessions", "last_order:7", "x")


def test_a_key_differing_at_the_target_fails_the_final_check_and_the_rollback_removes_the_copies(
    kv_tenants, cluster, zones, meta, kv_stores, monkeypatch
):
    """A KV setting that does not parse refuses admit in one line naming it, nothing
    copied; then a key changed in b behind the migration's back fails verify's look and,
    that look not passed, the final check's compare of every key before the flip, and the
    rollback removes b's copies of tenant 7's keys (a keeps them all; 407's in b
    untouched) and leaves the tenant writable in a."""
    kv_a, kv_b = _kv(kv_tenants, "a"), _kv(kv_tenants, "b")
    _seed(kv_a, kv_b)
    before = {z: {**_keys(kv_stores, z, "7"), **_keys(kv_stores, z, "407")} for z in ("a", "b")}
    ctx = _ctx(zones, meta, "kv-back-7")
    steps.preflight(ctx)
    monkeypatch.setenv("ZONESYNC_KV_B_URL", "http://127.0.0.1:1")
    with pytest.raises(MigrationRefused, match=r"^kv: ZONESYNC_KV_B_URL must look like redis://"):
        steps.admit(ctx)
    monkeypatch.delenv("ZONESYNC_KV_B_URL")
    assert _keys(kv_stores, "b", "7") == {} and not kv_stores["b"].client(0).exists("zonesync:migration:kv-back-7")
    steps.admit(ctx)
    assert _keys(kv_stores, "b", "7") == before["a"] != {}
    steps.admit(ctx)  # a re-run converges on the same copies
    assert _keys(kv_stores, "b", "7") == before["a"]
    kv_stores["b"].client(0).set("prod:session:7:stable", b"tampered")
    with pytest.raises(steps.MigrationError, match=r"verify: the LEs' KV keys differ: sessions "
                                                   r"prod:session:7:stable: value differs"):  # fmt: skip
        steps.verify_keys(ctx)  # (the DAG would roll back here; the window's check sees it too)
    steps.stop_write(ctx)
    _cut_over(ctx)
    with pytest.raises(steps.MigrationError, match=r"final_check: the LEs' KV keys differ: sessions "
                                                   r"prod:session:7:stable: value differs"):  # fmt: skip
        steps.final_check(ctx)
    with pytest.raises(steps.MigrationError, match="not verified"):
        steps.flip(ctx)
    assert "writable in a again" in steps.rollback(ctx, "test")
    assert _keys(kv_stores, "b", "7") == {} and {**_keys(kv_stores, "a", "7")} == before["a"]
    assert _keys(kv_stores, "b", "407") == before["b"]
    with zones["b"].connect("zonesync_app") as conn:
        assert not resident.admitted(conn, "kv-back-7")
    version = EntityRegistry(meta).head()
    wait_until(lambda: kv_a.guard.state.version >= version, 10, "a runs the rollback's version")
    kv_a.set("sessions", "last_order:7", "72")


def test_plan2_moves_the_keys_inside_its_window_and_compares_every_one(kv_tenants, cluster, zones, meta, kv_stores):
    """plan2 is refused when the tenant's rows and keys together pass plan2_max_rows (its
    52 keys, limit 50); with room, it stops tenant 7 first, then copies its keys and (no
    verify) compares all of them in the window: b holds exactly a's keys, with their
    values and expiry."""
    kv_a, kv_b = _kv(kv_tenants, "a"), _kv(kv_tenants, "b")
    _seed(kv_a, kv_b)
    before = _keys(kv_stores, "a", "7")
    ctx = _ctx(zones, meta, "kv-plan2-7", mode="plan2")
    steps.preflight(ctx)
    refused = r"^mode: plan2 stops tenant 7's writes while its 0 resident rows and 52 KV keys are copied, more "
    with pytest.raises(MigrationRefused, match=refused + r"than plan2_max_rows \(50\)"):
        steps.stop_first(ctx, max_rows=50)
    assert steps.stop_first(ctx, max_rows=1000)["stop_version"]
    with pytest.raises(EntityWriteStopped):
        kv_a.set("sessions", "last_order:7", "stopped")
    steps.admit(ctx)
    _cut_over(ctx)
    steps.final_check(ctx)
    steps.flip(ctx)
    run = steps.lift(ctx)
    assert run.status == "succeeded", run
    for db in REPOS.values():  # no look before the stop: the window compared every key
        state = kv_stores["b"].client(db).hgetall("zonesync:migration:kv-plan2-7")
        assert b"compared" not in state and int(state[b"window_compared"]) == int(state[b"bulk"]) > 0, state
    assert _keys(kv_stores, "b", "7") == before
    assert steps.release(ctx) == {"kv:chat_cache": 20, "kv:sessions": 32}
    assert _keys(kv_stores, "a", "7") == {}


def test_a_bulk_copy_killed_mid_way_converges_when_run_again(kv_tenants, cluster, zones, meta, kv_stores):
    """admit's bulk copy of tenant 7's 20,000 keys killed -9 in a process of its own once
    b holds some of them: admit run again copies the rest from the same start S, and b
    holds exactly a's keys."""
    kv_a, kv_b = _kv(kv_tenants, "a"), _kv(kv_tenants, "b")
    _seed(kv_a, kv_b)
    for i in range(20_000):
        kv_a.set("chat_cache", f"chat:7:bulk{i}", f"m{i}")
    before = _keys(kv_stores, "a", "7")
    chat = kv_stores["b"].client(REPOS["chat_cache"])
    ctx = _ctx(zones, meta, "kv-kill-7")
    steps.preflight(ctx)
    child = migration_process.spawn(meta, zones, "kv-kill-7", "7", "b", ["admit"])
    try:
        wait_until(lambda: chat.dbsize() >= 1_000 or child.poll() is not None, 60, "b holds part of the copy",
                   step=0.002)  # fmt: skip
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL, "admit ended before it was killed: kill it earlier"
    part = len(_keys(kv_stores, "b", "7"))
    assert 0 < part < len(before), part
    start = chat.hget("zonesync:migration:kv-kill-7", "start")
    steps.admit(ctx)
    assert chat.hget("zonesync:migration:kv-kill-7", "start") == start  # S recorded once
    assert _keys(kv_stores, "b", "7") == before


def _moved_by_plan2(zones, meta, run_id: str) -> steps.MigrationContext:
    """Tenant 7 moved a -> b by plan2 up to its lift (its release left to the caller)."""
    ctx = _ctx(zones, meta, run_id, mode="plan2")
    steps.preflight(ctx)
    steps.stop_first(ctx, max_rows=100_000)
    steps.admit(ctx)
    _cut_over(ctx)
    steps.final_check(ctx)
    steps.flip(ctx)
    assert steps.lift(ctx).status == "succeeded"
    return ctx


def test_a_key_whose_tag_outlived_it_neither_fails_the_move_nor_comes_back(kv_tenants, cluster, zones, meta,
                                                                           kv_stores):  # fmt: skip
    """S004-05, the migration's side: tenant 7's key tagged, then expired at the source (its
    tag outlives it, as `entity rows` shows): the move (plan2: every key compared in the
    window) neither fails on it nor brings it back in b; the live keys move."""
    kv_a = _kv(kv_tenants, "a")
    _kv(kv_tenants, "b")  # (b's guard, acking the run's versions)
    kv_a.set("sessions", "prod:session:7:live", "kept")
    kv_a.set("sessions", "prod:session:7:short", "gone soon", ttl_s=1)
    _tagged(meta, zones, "a")
    wait_until(lambda: not kv_stores["a"].client(REPOS["sessions"]).exists("prod:session:7:short"), 5, "expired")
    with zones["a"].connect() as conn, conn.cursor() as cur:  # its tag is still there
        cur.execute("SELECT COUNT(*) FROM zonesync.tag_segments WHERE repo = 'sessions' AND entity_id = '7'")
        assert cur.fetchone()[0] >= 1
    ctx = _moved_by_plan2(zones, meta, "kv-outlived-7")
    assert set(_keys(kv_stores, "b", "7")) == {("sessions", "prod:session:7:live")}
    assert not kv_stores["b"].client(REPOS["sessions"]).exists("prod:session:7:short")
    steps.release(ctx)
    assert _keys(kv_stores, "a", "7") == {}


def _killed_part_way(meta, zones, run_id: str, step: str, count, total: int) -> None:
    """`step` run in a process of its own, killed -9 once `count()` says it did part of its
    `total` keys' work (the test fails if it finished first: kill it earlier)."""
    child = migration_process.spawn(meta, zones, run_id, "7", "b", [step])
    try:
        wait_until(lambda: count() >= 1_000 or child.poll() is not None, 60, f"{step} part-way", step=0.002)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL, f"{step} ended before it was killed"
    assert 1_000 <= count() < total, count()


def test_the_removals_killed_mid_way_converge_when_run_again(kv_tenants, cluster, zones, meta, kv_stores):
    """The KV move's removals are idempotent: a rollback's removal of the target's 20,000
    copies, and (on a second run that completes) the release's removal of the source's,
    each killed -9 part-way in a process of its own, finish when run again: b (rolled back)
    or a (released) ends with none of tenant 7's keys, the other zone with all of them."""
    kv_a = _kv(kv_tenants, "a")
    _kv(kv_tenants, "b")  # (b's guard, acking the run's versions)
    for i in range(20_000):
        kv_a.set("chat_cache", f"chat:7:bulk{i}", f"m{i}")
    before = _keys(kv_stores, "a", "7")
    chat_a, chat_b = (kv_stores[z].client(REPOS["chat_cache"]) for z in ("a", "b"))
    tenant_keys = lambda client: sum(1 for _ in client.scan_iter(match="chat:7:*", count=5_000))  # noqa: E731

    back = _ctx(zones, meta, "kv-back-7", mode="plan2")
    steps.preflight(back)
    steps.stop_first(back, max_rows=100_000)
    steps.admit(back)
    assert _keys(kv_stores, "b", "7") == before
    _killed_part_way(meta, zones, "kv-back-7", "rollback", lambda: 20_000 - tenant_keys(chat_b), 20_000)
    steps.rollback(back, "test: run again")
    assert _keys(kv_stores, "b", "7") == {} and _keys(kv_stores, "a", "7") == before

    ctx = _moved_by_plan2(zones, meta, "kv-release-7")
    _killed_part_way(meta, zones, "kv-release-7", "release", lambda: 20_000 - tenant_keys(chat_a), 20_000)
    steps.release(ctx)
    assert _keys(kv_stores, "a", "7") == {} and _keys(kv_stores, "b", "7") == before
