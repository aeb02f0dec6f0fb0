"""KV repos (seed 004 §3.2.2, S004-07/08; dal/kv.py, tagging/kv_tagger.py): each zone's
private redis-server, written through the KV guard, tagged by the zone's KV tagger.

A key is written only where its entity (named by the key's pattern) may be written, with
its change-log entry in the same MULTI; a key no pattern or two patterns match is refused
(the second alerted); the KV tagger follows the log into the tag store, killed -9 and
restarted without a lost or extra tag; `zonesync entity rows` lists an entity's keys
beside its rows; the server killed -9 keeps every key and entry a write returned for."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.support.background import wait_until
from tests.support.kv_rules import RULES
from zonesync import cli
from zonesync.dal.errors import EntityWriteStopped, KeyAmbiguous, KeyUntagged, WrongZone
from zonesync.dal.kv import STREAM, KvGuard
from zonesync.dal.state import GuardState
from zonesync.dev import redis as kv_redis
from zonesync.meta.store import MetaStore
from zonesync.runtime.kv_endpoint import kv_endpoint
from zonesync.tagging import kv_tagger
from zonesync.tagging.kv_patterns import parse as parse_pattern
from zonesync.tagging.radix import PatternTree
from zonesync.tagging.rules import parse
from zonesync.tagging.tag_store import KV_TABLE, TagStore

pytestmark = pytest.mark.integration

REPOS = ("sessions", "chat_cache")


def _clear(zones, kv_stores) -> None:
    for zone, inst in kv_stores.items():
        for db in (0, 1):
            inst.client(db).flushdb()
        with zones[zone].connect().cursor() as cur:
            cur.execute("DELETE FROM zonesync.tag_segments WHERE repo IN ('sessions', 'chat_cache')")
            cur.execute("DELETE FROM zonesync.tag_kv_state")


@pytest.fixture
def kv_env(zones, meta, guard_env, kv_stores):
    """Tag rules with the sessions repo's patterns; tenants placed by the ZSID rules only
    (tenant t -> ZSID t: a owns 0-399, b 400-799); every zone's KV repos and KV tags empty."""
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")
    MetaStore(meta).publish_tags(parse(RULES), "test: KV patterns")
    _clear(zones, kv_stores)
    yield guard_env
    _clear(zones, kv_stores)
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")


def _kv(guard_env, zone: str) -> KvGuard:
    return KvGuard(guard_env(zone), kv_endpoint(zone))


def _log(kv_stores, zone: str) -> list[dict]:
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _, fields in kv_stores[zone].client(0).xrange(STREAM)]  # fmt: skip


def test_the_guard_writes_an_owned_key_with_its_log_entry_and_refuses_the_rest(kv_env, kv_stores, meta):
    kv = _kv(kv_env, "a")
    redis_a = kv_stores["a"].client(0)
    kv.set("sessions", "prod:session:7:tok1", b"v1", ttl_s=600)
    assert redis_a.get("prod:session:7:tok1") == b"v1" and 590 <= redis_a.ttl("prod:session:7:tok1") <= 600
    assert _log(kv_stores, "a") == [{"op": "set", "key": "prod:session:7:tok1", "entity_type": "tenant",
                                     "entity_id": "7", "version": str(kv.guard.state.version)}]  # fmt: skip

    refusals = [
        ("prod:session:407:tok", WrongZone, "owned by zone b"),  # tenant 407: ZSID 407, zone b's
        ("prod:session:abc:tok", KeyUntagged, "matches no pattern"),  # tenant_id must be digits
        ("zonesync:changes", KeyUntagged, "zonesync's own"),
    ]
    for key, error, text in refusals:
        with pytest.raises(error, match=text):
            kv.set("sessions", key, b"x")
        assert redis_a.exists(key) == (key == "zonesync:changes")  # (the log itself, untouched)
    with pytest.raises(KeyUntagged, match="repo chat_cache has no KV pattern"):
        kv.set("chat_cache", "anything:1", b"x")
    assert kv_stores["a"].client(1).dbsize() == 0
    assert len(_log(kv_stores, "a")) == 1 and kv.refused == 4

    # tenant 7 stopped (a migration's stop-write): writes refused once the guard runs that version, reads go on
    version = MetaStore(meta).publish_entities([{"le_type": "tenant", "le_id": "7", "unit_zone": "a",
                                                 "stop_write": 1}], "test: stop-write tenant 7")  # fmt: skip
    wait_until(lambda: kv.guard.state.version >= version, 10, "the guard runs the stop-write version")
    with pytest.raises(EntityWriteStopped):
        kv.delete("sessions", "prod:session:7:tok1")
    assert kv.get("sessions", "prod:session:7:tok1") == b"v1"
    # moved to b: a refuses, b's guard writes it (b's own repo, b's own log)
    version = MetaStore(meta).publish_entities([{"le_type": "tenant", "le_id": "7", "unit_zone": "b",
                                                 "stop_write": 0}], "test: tenant 7 in b")  # fmt: skip
    kv_b = _kv(kv_env, "b")
    wait_until(lambda: kv.guard.state.version >= version and kv_b.guard.state.version >= version, 10, "both run it")
    with pytest.raises(WrongZone, match="tenant 7 is owned by zone b"):
        kv.set("sessions", "last_order:7", b"1")
    kv_b.set("sessions", "last_order:7", b"1")
    assert [e["key"] for e in _log(kv_stores, "b")] == ["last_order:7"] and len(_log(kv_stores, "a")) == 1


def test_a_key_two_patterns_match_is_refused_and_alerted_never_written(kv_env, kv_stores, meta):
    """The registration check keeps overlapping patterns out of meta (test_tag_rules); a
    guard whose state holds two anyway (the seed's pair) refuses the key and alerts."""
    kv = _kv(kv_env, "a")
    pair = [parse_pattern("{{table_id}}_{{rev}}_{{rec_id}}", {}, "tenant", "rev"),
            parse_pattern("{{table_id}}_{{rev}}_{{rec_id}}_{{level}}", {}, "tenant", "rev")]  # fmt: skip
    with kv.guard.lock.exclusive():
        s = kv.guard.state
        kv.guard.state = GuardState(s.version, s.zone, s.rules, s.entities, s.tags_version,
                                    {**s.kv_trees, "chat_cache": PatternTree(pair)})  # fmt: skip
    (before,), _ = meta.run("SELECT COALESCE(MAX(id), 0) FROM alerts")
    with pytest.raises(KeyAmbiguous, match="matches 2 pattern"):
        kv.set("chat_cache", "tableStr_10_abccc_1", b"x")
    assert kv_stores["a"].client(1).dbsize() == 0
    rows, _ = meta.run("SELECT kind, detail FROM alerts WHERE id > %s", (before,))
    assert [(k, json.loads(d)["key"]) for k, d in rows] == [("kv_ambiguous", "tableStr_10_abccc_1")]
    kv.set("chat_cache", "tableStr_10_abc", b"y")  # one pattern: written
    assert kv_stores["a"].client(1).get("tableStr_10_abc") == b"y"


def _tagger(zone: str, log_path) -> subprocess.Popen:
    """The zone's KV tagger, the `zonesync tag-kv` worker, in a process of its own."""
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "zonesync.cli", "tag-kv", "--zone", zone], env=dict(os.environ),
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip


def _kv_tags(zones, zone: str) -> dict[str, tuple[str, int]]:
    """json key -> (entity id, deleted) of the zone's folded KV tags (repo sessions)."""
    rows = TagStore(lambda: zones[zone].connect("zonesync_app"), "sessions").dump()
    assert all(r[0] == KV_TABLE and r[2] == "tenant" for r in rows)
    assert len({r[1] for r in rows}) == len(rows), "a key tagged in two entities"
    return {json.loads(r[1]): (r[3], r[5]) for r in rows}


def test_the_kv_tagger_killed_mid_load_converges_with_no_lost_or_extra_tag(kv_env, kv_stores, zones, tmp_path):
    """Zone a's KV tagger (the real worker) killed -9 three times while a writer sets,
    overwrites and deletes keys of 30 tenants through the guard: once caught up, its live
    tags are exactly the repo's keys, each with its tenant, and every deleted key is a
    deleted entry; the log is trimmed behind the tagger."""
    kv, rng, stop = _kv(kv_env, "a"), random.Random(21), threading.Event()
    deleted: set[str] = set()
    writes = [0]

    def load():
        n = 0
        while not stop.is_set():
            writes[0] = n
            tenant = rng.randrange(30)
            key = f"prod:session:{tenant}:t{rng.randrange(40)}" if n % 3 else f"last_order:{tenant}"
            if rng.random() < 0.2:
                kv.delete("sessions", key)
                deleted.add(key)
            else:
                kv.set("sessions", key, str(n))
                deleted.discard(key)
            n += 1

    log = tmp_path / "kv_tagger.log"
    child = _tagger("a", log)
    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.8, 1.6))
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
            child = _tagger("a", log)
        time.sleep(0.5)
        stop.set()
        writer.join(30)
        ep = kv_endpoint("a")
        wait_until(lambda: kv_tagger.caught_up(ep, zones["a"].connect), 60, "the KV tagger caught up")
        keys = {k.decode() for k in kv_stores["a"].client(0).scan_iter() if k != STREAM}
        tags = _kv_tags(zones, "a")
        assert len(keys) > 100, log.read_text()[-2000:]
        assert {k for k, (_, d) in tags.items() if not d} == keys
        assert {k for k, (_, d) in tags.items() if d} == deleted
        assert all(t == k.split(":")[-2 if k.startswith("prod") else -1] for k, (t, _) in tags.items())
        # trimmed as tagged (XTRIM ~: whole nodes of the stream, up to 100 entries each)
        assert writes[0] > 500 and kv_stores["a"].client(0).xlen(STREAM) <= 100
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(20)


def test_entity_rows_lists_an_entitys_keys_and_marks_an_expired_one(kv_env, kv_stores, zones, capsys, spark, tmp_path):
    kv = _kv(kv_env, "a")
    with kv.guard.transaction() as tx:
        tx.insert("orders", {"order_id": 71, "tenant_id": 7, "amount": 1})
    kv.set("sessions", "prod:session:7:a", b"1")
    kv.set("sessions", "prod:session:7:b", b"1", ttl_s=1)
    kv.set("sessions", "last_order:7", b"71")
    kv.set("sessions", "prod:session:8:a", b"1")
    tagger = kv_tagger.KvTagger("a", kv_endpoint("a"), zones["a"].connect, kv.guard.meta)
    thread = threading.Thread(target=tagger.run, kwargs={"max_seconds": 30}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: kv_tagger.caught_up(kv_endpoint("a"), zones["a"].connect), 20, "tagged")
        wait_until(lambda: not kv_stores["a"].client(0).exists("prod:session:7:b"), 5, "the key expired")
    finally:
        tagger.stop()
        thread.join(10)
    assert cli.main(["entity", "rows", "tenant", "7", "--zone", "a", "--keys"]) == 0
    out = capsys.readouterr().out
    assert "tenant 7 in zone a: 3 KV key(s) (sessions 3)" in out
    assert "  kv sessions last_order:7\n" in out and "  kv sessions prod:session:7:a\n" in out
    assert "  kv sessions prod:session:7:b  (gone: expired" in out and "prod:session:8" not in out
    # the same from the Spark job for large entities (spark_jobs/entity_rows.py): keys by their tags
    from spark_jobs import entity_rows
    from tests.support.rules import meta_url

    zone_a = f"a=jdbc:mysql://127.0.0.1:{zones['a'].port}/zonesync_app"
    args = entity_rows.parse_args(["--entity", "tenant:7", "--zone", zone_a, "--zone-user", "a=root", "--meta",
                                   meta_url(kv.guard.meta), "--output", str(tmp_path / "rows.json"), "--keys",
                                   str(tmp_path / "keys")])  # fmt: skip
    assert entity_rows.run(spark, args)["kv_keys"] == {"sessions": 3}  # (the expired one's tag outlives it)
    written = [json.loads(line) for f in sorted((tmp_path / "keys").glob("part-*.json"))
               for line in f.read_text().splitlines()]  # fmt: skip
    assert sorted(json.loads(r["idx"]) for r in written if r["repo"] == "sessions") == [
        "last_order:7", "prod:session:7:a", "prod:session:7:b"]  # fmt: skip


def test_the_server_killed_keeps_every_write_that_returned(kv_env, kv_stores, test_cfg):
    """A kill -9 of zone c's redis-server right after the writes loses none of them, nor
    their log entries (Redis write()s the AOF before it replies); the guard writes on."""
    from zonesync.dev import procs

    kv = _kv(kv_env, "c")
    for i in range(200):
        kv.set("sessions", f"prod:session:{800 + i % 200}:k{i}", str(i))
    inst = kv_stores["c"]
    pid = procs.read(test_cfg.run_dir, inst.name).pid
    os.kill(pid, signal.SIGKILL)
    assert procs.wait_until(lambda: not procs.pid_matches(pid, "redis"), 10)
    kv_redis.start(inst, test_cfg.run_dir, test_cfg.log_dir)
    assert inst.client(0).dbsize() == 201 and inst.client(0).xlen(STREAM) == 200
    assert inst.client(0).get("prod:session:999:k199") == b"199"
    # the restarted server has no scripts loaded: the guard's next write loads its own (NOSCRIPT ran nothing)
    kv.set("sessions", "prod:session:900:after", "x")
    assert inst.client(0).get("prod:session:900:after") == b"x" and inst.client(0).xlen(STREAM) == 201


def test_the_demos_sample_keys_are_written_through_each_zones_guard_and_tagged(kv_env, kv_stores, zones, meta,
                                                                               test_cfg):  # fmt: skip
    """`make demo`'s KV step (dev/demo.py) with examples/tags.yaml: each zone's tenants'
    keys in its own sessions repo, each tagged by that zone's KV tagger."""
    from tests.support.rules import rules_doc
    from zonesync.config import REPO_ROOT
    from zonesync.dev import demo
    from zonesync.tagging.rules import load_file

    MetaStore(meta).publish_tags(load_file(REPO_ROOT / "examples" / "tags.yaml"), "test: the sample tag rules")
    assert "in force" in demo.publish_example_tags(test_cfg)
    rules = rules_doc()
    assert demo.load_sample_keys(test_cfg, rules) == {"a": 20, "b": 20, "c": 20}
    for zone in ("a", "b", "c"):
        tagger = kv_tagger.KvTagger(zone, kv_endpoint(zone), zones[zone].connect, meta)
        tagger.run(max_seconds=1.0)
        tenant = demo.owned_tenants(rules, zone, 1)[0]
        assert kv_stores[zone].client(0).get(f"last_order:{tenant}") == str(tenant).encode()
        tags = _kv_tags(zones, zone)
        assert len(tags) == 20 and tags[f"demo:session:{tenant}:tok{tenant}"] == (str(tenant), 0)
