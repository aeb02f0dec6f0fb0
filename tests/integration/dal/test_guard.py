"""The write guard against real zones and a real meta store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import guard_process
from tests.support.rules import meta_url, rules_doc
from tests.support.tcp_proxy import TcpProxy
from zonesync.dal import (
    EntityWriteStopped,
    GuardError,
    GuardNotSynced,
    TableContractError,
    TransactionDeadlineExceeded,
    WrongZone,
    ZoneReshardingBlocked,
    ZsidUndetermined,
)
from zonesync.dal.hlc import HybridClock
from zonesync.meta import guards
from zonesync.meta.db import MetaConfig
from zonesync.meta.store import MetaStore

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def rows(zones, zone, table="tenants"):
    with zones[zone].connect("zonesync_app").cursor() as cur:
        cur.execute(f"SELECT tenant_id, name, _zs_origin, _zs_version FROM {table} ORDER BY tenant_id")
        return cur.fetchall()


def test_owner_writes_and_bookkeeping_others_refused(guard_env, zones):
    ga = guard_env("a")
    before = time.time_ns() // 1000
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 5, "name": "five"})
        tx.insert("tenants", {"tenant_id": 1024 + 6, "name": "six"})  # ZSID 6
    (t5, name, origin, version), _ = rows(zones, "a")
    assert (t5, name, origin) == (5, "five", 1) and version >= before
    with pytest.raises(WrongZone) as err:
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 7, "name": "ok"})
            tx.insert("tenants", {"tenant_id": 450, "name": "b's"})
    assert err.value.owner == "b" and err.value.zsid == 450
    assert [r[0] for r in rows(zones, "a")] == [5, 1030], "the refused transaction left nothing behind"

    with ga.transaction() as tx:
        assert tx.update("tenants", {"tenant_id": 5}, {"name": "FIVE"}) == 1
        assert tx.update("tenants", {"tenant_id": 99}, {"name": "none"}) == 0
    (_, name, _, v2), _ = rows(zones, "a")
    assert name == "FIVE" and v2 > version
    with pytest.raises(WrongZone):  # moving the row to b's ZSID is a write in b
        with ga.transaction() as tx:
            tx.update("tenants", {"tenant_id": 5}, {"tenant_id": 405})
    with ga.transaction() as tx:
        assert tx.delete("tenants", {"tenant_id": 1030}) == 1
    assert [r[0] for r in rows(zones, "a")] == [5]


def test_undeterminable_writes_are_refused(guard_env, zones):
    ga = guard_env("a")
    with pytest.raises(ZsidUndetermined, match="has no ZSID rule"):
        with ga.transaction() as tx:
            tx.insert("unlisted", {"id": 1})
    with pytest.raises(TableContractError, match="SELECT only"):
        with ga.transaction() as tx:
            tx.query("DELETE FROM tenants")
    with pytest.raises(TableContractError, match="maintained by the guard"):
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 1, "name": "x", "_zs_origin": 3})
    with pytest.raises(TableContractError, match="primary key"):
        with ga.transaction() as tx:
            tx.update("tenants", {"name": "x"}, {"name": "y"})
    with zones["a"].connect("zonesync_app").cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS no_pk (tenant_id BIGINT, _zs_origin INT, _zs_version BIGINT)")
    from zonesync.rules import parse

    doc = rules_doc().to_doc()
    doc["tables"]["no_pk"] = {"column": "tenant_id", "function": "modulo", "buckets": 1024}
    guards.push_and_wait(ga.meta, parse(doc), "add no_pk")
    with pytest.raises(TableContractError, match="no primary key"):
        with ga.transaction() as tx:
            tx.insert("no_pk", {"tenant_id": 1})
    assert rows(zones, "a") == ()


def test_versions_strictly_increase_across_skewed_clocks(guard_env, zones):
    hour = 3_600_000_000
    ahead = guard_env("a", clock=HybridClock(lambda: time.time_ns() // 1000 + hour))
    behind = guard_env("a", clock=HybridClock(lambda: time.time_ns() // 1000 - hour))
    with ahead.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 1, "name": "v0"})
    seen = [rows(zones, "a")[0][3]]
    for i in range(6):
        g = behind if i % 2 == 0 else ahead
        with g.transaction() as tx:
            tx.update("tenants", {"tenant_id": 1}, {"name": f"v{i + 1}"})
        seen.append(rows(zones, "a")[0][3])
    assert all(b > a for a, b in zip(seen, seen[1:], strict=False)), seen


def test_block_resharding_active_sequence(guard_env, meta):
    ga, gb = guard_env("a"), guard_env("b")
    moved = [{"zsids": "0-9", "zone": "a", "status": "BLOCK"}, {"zsids": "10-399", "zone": "a"}]
    tail = [{"zsids": "400-799", "zone": "b"}, {"zsids": "800-1023", "zone": "c"}]
    guards.push_and_wait(meta, rules_doc(moved + tail), "block 0-9", zones={"a", "b"}, require_writable=False)
    for g in (ga, gb):
        with pytest.raises(ZoneReshardingBlocked, match="Zone resharding block error: ZSID 3 is BLOCK"):
            with g.transaction() as tx:
                tx.insert("tenants", {"tenant_id": 3, "name": "x"})
    with ga.transaction() as tx:  # unmoved ZSIDs are never blocked
        tx.insert("tenants", {"tenant_id": 11, "name": "fine"})
    resharding = [{"zsids": "0-9", "zone": "b", "status": "RESHARDING"}, {"zsids": "10-399", "zone": "a"}]
    guards.push_and_wait(meta, rules_doc(resharding + tail), "reshard", zones={"a", "b"}, require_writable=False)
    with pytest.raises(ZoneReshardingBlocked, match="RESHARDING"):
        with gb.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 3, "name": "x"})
    active = [{"zsids": "0-9", "zone": "b"}, {"zsids": "10-399", "zone": "a"}]
    guards.push_and_wait(meta, rules_doc(active + tail), "activate", zones={"a", "b"})
    with gb.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 3, "name": "now b's"})
    with pytest.raises(WrongZone):
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 4, "name": "x"})


def test_stop_write_entity(guard_env, meta, zones):
    ga = guard_env("a")
    store = MetaStore(meta)
    version = store.publish_entities([{"le_type": "tenant", "le_id": 7, "unit_zone": "a", "stop_write": True}], "mig")
    guards.wait_acks(meta, version, {"a"}, 2)
    with pytest.raises(EntityWriteStopped, match="tenant 7"):
        with ga.transaction() as tx:
            tx.insert("orders", {"order_id": 1, "tenant_id": 7, "amount": 1})
    with ga.transaction() as tx:  # other tenants, and tables without an entity, are unaffected
        tx.insert("orders", {"order_id": 2, "tenant_id": 8, "amount": 1})
        tx.insert("tenants", {"tenant_id": 7, "name": "no entity column here"})
    version = store.publish_entities([{"le_type": "tenant", "le_id": 7, "unit_zone": "b"}], "moved to b")
    guards.wait_acks(meta, version, {"a"}, 2)
    with pytest.raises(WrongZone, match="tenant 7 is owned by zone b"):
        with ga.transaction() as tx:
            tx.insert("orders", {"order_id": 3, "tenant_id": 7, "amount": 1})


def test_a_stopped_or_moved_entitys_writes_leave_nothing_and_its_own_row_is_judged_alike(guard_env, meta, zones):
    """S004-01, S004-03, S004-16: with `tenants` declaring its entity, tenant 7's own row and
    its orders are judged alike: while it is stopped every insert, update and delete of
    either is refused and reads go on; once it moved to b, zone a refuses them; each
    refused write left the tables exactly as they were."""
    from tests.support.rules import BASE

    tables = {**BASE["tables"], "tenants": {**BASE["tables"]["tenants"],
                                            "entity": {"type": "tenant", "column": "tenant_id"}}}  # fmt: skip
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")  # (earlier tests placed tenant 7)
    guards.push_and_wait(meta, rules_doc(tables=tables), "tenants name their entity")
    ga, store = guard_env("a"), MetaStore(meta)
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "seven"})
        tx.insert("orders", {"order_id": 71, "tenant_id": 7, "amount": 1})

    def orders():
        with zones["a"].connect("zonesync_app").cursor() as cur:
            cur.execute("SELECT order_id, tenant_id, amount, _zs_version FROM orders ORDER BY order_id")
            return cur.fetchall()

    before = (rows(zones, "a"), orders())
    writes = [
        lambda tx: tx.insert("orders", {"order_id": 72, "tenant_id": 7, "amount": 2}),
        lambda tx: tx.update("orders", {"order_id": 71}, {"amount": 5}),
        lambda tx: tx.delete("orders", {"order_id": 71}),
        lambda tx: tx.update("tenants", {"tenant_id": 7}, {"name": "renamed"}),
        lambda tx: tx.delete("tenants", {"tenant_id": 7}),
    ]
    for unit, stop, error in (("a", True, EntityWriteStopped), ("b", False, WrongZone)):
        version = store.publish_entities([{"le_type": "tenant", "le_id": 7, "unit_zone": unit, "stop_write": stop}],
                                         f"tenant 7: {unit}, stop {stop}")  # fmt: skip
        guards.wait_acks(meta, version, {"a"}, 2)
        for write in writes:
            with pytest.raises(error, match="tenant 7"):
                with ga.transaction() as tx:
                    write(tx)
            assert (rows(zones, "a"), orders()) == before
        with ga.transaction() as tx:  # reads go on
            assert tx.query("SELECT name FROM tenants WHERE tenant_id = 7") == [("seven",)]
    with ga.transaction() as tx:  # another tenant's rows are unaffected
        tx.insert("tenants", {"tenant_id": 8, "name": "eight"})


def test_commit_rechecks_against_the_version_current_at_commit(guard_env, meta, zones):
    ga = guard_env("a")
    with pytest.raises(ZoneReshardingBlocked):
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 1, "name": "in flight"})
            blocked = [
                {"zsids": "0-399", "zone": "a", "status": "BLOCK"},
                {"zsids": "400-799", "zone": "b"},
                {"zsids": "800-1023", "zone": "c"},
            ]
            guards.push_and_wait(meta, rules_doc(blocked), "block all of a", zones={"a"}, require_writable=False)
    assert rows(zones, "a") == ()


def test_transaction_over_its_deadline_is_refused_at_commit(guard_env, meta, zones):
    guards.push_and_wait(meta, rules_doc(txn_deadline_ms=200), "short deadline")
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 1, "name": "quick"})
    with pytest.raises(TransactionDeadlineExceeded, match="over the 200 ms deadline"):
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 2, "name": "slow"})
            time.sleep(0.3)
    assert [r[0] for r in rows(zones, "a")] == [1]


def test_rules_apply_is_enforced_in_every_zone_within_a_second(guard_env, meta, tmp_path):
    guard_by_zone = {z: guard_env(z, period=5.0, poll=0.1) for z in ("a", "b", "c")}
    new = rules_doc(
        [{"zsids": "0-99", "zone": "c"}, {"zsids": "100-799", "zone": "b"}, {"zsids": "800-1023", "zone": "a"}]
    ).to_doc()
    import yaml

    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(new))
    env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "zonesync"),
            "rules",
            "apply",
            str(path),
            "--reason",
            "rotate",
            "--move-owners",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "acked by 3 guard instance(s)" in result.stdout
    version = MetaStore(meta).head()
    with meta.connect().cursor() as cur:
        cur.execute(
            "SELECT MAX(TIMESTAMPDIFF(MICROSECOND, v.created_at, a.acked_at)) / 1e6 FROM guard_acks a "
            "JOIN versions v ON v.version = a.version WHERE a.version = %s",
            (version,),
        )
        slowest = float(cur.fetchone()[0])
    assert slowest < 1.0, f"slowest ack took {slowest:.3f} s"
    with guard_by_zone["c"].transaction() as tx:
        tx.insert("tenants", {"tenant_id": 50, "name": "c owns it now"})
    with pytest.raises(WrongZone):
        with guard_by_zone["a"].transaction() as tx:
            tx.insert("tenants", {"tenant_id": 51, "name": "x"})


def test_lease_expiry_fails_closed_then_recovers(guard_env, meta):
    proxy = TcpProxy(meta.port).start()
    via_proxy = MetaConfig(meta.host, proxy.port, meta.user, meta.password, meta.database)
    g = guard_env("a", period=0.2, poll=0.05, lease=0.6, meta_cfg=via_proxy)
    with g.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 1, "name": "before"})
    proxy.cut()
    time.sleep(0.9)
    with pytest.raises(GuardNotSynced, match="writes are refused"):
        with g.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 2, "name": "during"})
    with pytest.raises(GuardNotSynced, match="writes are refused"):
        with g.transaction() as tx:
            assert tx.query("SELECT name FROM tenants WHERE tenant_id = 1") == [("before",)]
            tx.update("tenants", {"tenant_id": 1}, {"name": "during"})
    with g.transaction() as tx:  # reads go on (S000-13)
        assert tx.query("SELECT name FROM tenants WHERE tenant_id = 1") == [("before",)]
        assert tx.query("SELECT COUNT(*) FROM tenants WHERE tenant_id = 2") == [(0,)]
    proxy.restore()
    deadline = time.monotonic() + 5
    while not g.synced() and time.monotonic() < deadline:
        time.sleep(0.05)
    with g.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 3, "name": "after"})
    proxy.cut()


def _guard_process(meta, zones, zone, period):
    return guard_process.spawn(meta, zones, zone, period)


def test_killed_instance_turns_unhealthy_and_blocks_changes(guard_env, meta, zones):
    proc, instance = _guard_process(meta, zones, "b", 0.2)
    assert instance.startswith("b-")
    healthy = {g.instance_id: g.healthy for g in guards.list_instances(meta)}
    assert healthy[instance] is True
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)  # 4 periods of 0.2 s
    sick = {g.instance_id: g.healthy for g in guards.list_instances(meta)}
    assert sick[instance] is False
    with pytest.raises(guards.UnhealthyGuards, match=instance):
        guards.push_and_wait(meta, rules_doc(), "blocked by the dead instance")
    env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}
    zs = str(Path(sys.executable).parent / "zonesync")
    listing = subprocess.run([zs, "guards"], env=env, capture_output=True, text=True)
    assert listing.returncode == 1 and "UNHEALTHY" in listing.stdout and instance in listing.stdout
    forgot = subprocess.run([zs, "guards", "forget", instance], env=env, capture_output=True, text=True)
    assert forgot.returncode == 0
    guards.push_and_wait(meta, rules_doc(), "fine again")


def test_ack_timeout_names_the_laggard(guard_env, meta, zones):
    proc, instance = _guard_process(meta, zones, "c", 2.0)  # unhealthy only after 8 s
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        with pytest.raises(guards.AckTimeout, match=f"{instance} \\(zone c, runs v"):
            guards.push_and_wait(meta, rules_doc(), "nobody home", timeout=0.5)
        os.kill(proc.pid, signal.SIGCONT)
        guards.wait_acks(meta, MetaStore(meta).head(), {"c"}, timeout=3)
    finally:
        proc.kill()
        proc.wait()


def test_guard_lifecycle_and_bad_zone(guard_env, meta):
    g = guard_env("a")
    assert g.instance_id in {x.instance_id for x in guards.list_instances(meta)}
    g.close()
    assert g.instance_id not in {x.instance_id for x in guards.list_instances(meta)}
    with pytest.raises(GuardError, match="zone 'q' is not in the meta store"):
        guard_env("q") if False else __import__("zonesync.dal", fromlist=["Guard"]).Guard(
            meta, "q", None, period=0.2
        ).start(timeout=0.5)
    with pytest.raises(GuardError, match="shorter than 4 periods"):
        __import__("zonesync.dal", fromlist=["Guard"]).Guard(meta, "a", None, period=1.0, lease=5.0)


def test_concurrent_pushes_get_distinct_consecutive_versions(meta, guard_env):
    store = MetaStore(meta)
    start = store.head()
    out, errors = [], []

    def push():
        try:
            out.append(store.publish_rules(rules_doc(), "race"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=push) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(out) == list(range(start + 1, start + 9))


class _PublishAfterHeadRead:
    """A guard's meta connection (the real one) that runs `publish` once, right after the
    guard's first read of the head: an entity published between the guard's reads."""

    def __init__(self, conn, publish):
        self.conn, self.publish = conn, publish

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def cursor(self):
        outer, cur = self, self.conn.cursor()

        class Cursor:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                cur.close()

            def __getattr__(self, name):
                return getattr(cur, name)

            def execute(self, sql, args=None):
                n = cur.execute(sql, args)  # (a buffered result: the caller fetches the head read)
                if sql == "SELECT version FROM head WHERE id = 1" and outer.publish is not None:
                    publish, outer.publish = outer.publish, None
                    publish()
                return n

        return Cursor()


def test_an_entity_published_between_the_guards_reads_is_never_missing_from_its_state(guard_env, meta, zones):
    """Entities are updated in place, so a guard that read the head and then the entities
    in another snapshot lost an entity published in between (its row's version above the
    head read) and judged its writes by the ZSID rules alone: tenant 7, moved to b, would
    be written in a. The state is one snapshot: tenant 7 is there as it is now, stopped."""
    from zonesync.dal import Guard, ZoneDB

    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")
    store = MetaStore(meta)
    store.publish_entities([{"le_type": "tenant", "le_id": 7, "unit_zone": "b", "stop_write": False}], "7 in b")
    g = Guard(meta, "a", ZoneDB("127.0.0.1", zones["a"].port, "root", "", "zonesync_app"))
    try:
        g._register()
        g._sync()
        assert g.state.entities[("tenant", "7")] == ("b", False)
        g._meta_conn = _PublishAfterHeadRead(g._meta(), lambda: store.publish_entities(
            [{"le_type": "tenant", "le_id": 7, "unit_zone": "b", "stop_write": True}], "7 stopped"))  # fmt: skip
        store.publish_rules(rules_doc(), "a newer version for the guard to load")
        g._sync()
        assert g.state.version == store.head()
        assert g.state.entities.get(("tenant", "7")) == ("b", True)
    finally:
        g._meta_conn = g._meta_conn.conn if isinstance(g._meta_conn, _PublishAfterHeadRead) else g._meta_conn
        g.close()
