"""KV repos (issue 21's KV half): the KV guard's cost per write and the KV tagger's rate.

KV_KEYS (40k by default, `ZONESYNC_BENCH_KV_KEYS`) keys of 1000 tenants
(`bench:session:<tenant>:<n>`, one in five a delete of an earlier key) in zone a's
`sessions` repo, on zone a's private redis-server, REPS repeats, each from an empty repo
and an empty KV tag store:

1. baseline: a plain SET (or DEL) per key from one client, no guard;
2. zonesync: the same writes through the KV guard (the key's pattern and entity judged
   by the guard's state, then MULTI SET/DEL + XADD to the repo's log, one round trip).
   Writes per second, the worst of the guard's repeats against the best of the plain
   ones. Target >= 0.5x: judging a key and logging it cost at most as much again as the
   write itself.
3. the zone's KV tagger over the log the guarded writes left, from its start to tagged
   up to the log's end, against the guarded write rate (the worst tagger against the
   best guard). Target >= 1.0x: the tagger keeps up with the guard's writers.
"""

from __future__ import annotations

import os
import random
import threading
import time

from bench.harness import BenchEnv, Row

KV_KEYS = int(os.environ.get("ZONESYNC_BENCH_KV_KEYS", 40_000))
REPS = 3
TAGS = {"kv": [{"repo": "sessions", "pattern": "bench:session:{{tenant}}:{{n}}",
                "entity": {"type": "tenant", "field": "tenant"},
                "where": {"tenant": {"digits": True}, "n": {"digits": True}}}]}  # fmt: skip


def _ops(seed: int) -> list[tuple[str, str]]:
    rng, live, ops = random.Random(seed), [], []
    for n in range(KV_KEYS):
        if live and rng.random() < 0.2:
            ops.append(("del", live.pop(rng.randrange(len(live)))))
        else:
            key = f"bench:session:{rng.randrange(400)}:{n}"  # tenants 0-399: zone a's
            live.append(key)
            ops.append(("set", key))
    return ops


def _clear(env: BenchEnv, client) -> None:
    client.flushdb()
    with env.instances["a"].connect().cursor() as cur:
        cur.execute("DELETE FROM zonesync.tag_segments WHERE repo = 'sessions'")
        cur.execute("DELETE FROM zonesync.tag_kv_state WHERE repo = 'sessions'")


def _plain(client, ops) -> float:
    started = time.perf_counter()
    for op, key in ops:
        if op == "set":
            client.set(key, b"x" * 32)
        else:
            client.delete(key)
    return len(ops) / (time.perf_counter() - started)


def _guarded(kv, ops) -> float:
    started = time.perf_counter()
    for op, key in ops:
        if op == "set":
            kv.set("sessions", key, b"x" * 32)
        else:
            kv.delete("sessions", key)
    return len(ops) / (time.perf_counter() - started)


def _tagger(env: BenchEnv, ep, meta, entries: int) -> float:
    from zonesync.tagging.kv_tagger import KvTagger, caught_up

    connect = env.instances["a"].connect
    tagger = KvTagger("a", ep, connect, meta)
    started = time.perf_counter()
    thread = threading.Thread(target=tagger.run, daemon=True)
    thread.start()
    try:
        while not caught_up(ep, connect):
            time.sleep(0.005)
        took = time.perf_counter() - started
    finally:
        tagger.stop()
        thread.join(30)
    if tagger.read != entries or tagger.refused:
        raise AssertionError(f"the KV tagger took {tagger.read} log entries of {entries} ({tagger.refused} refused)")
    return entries / took


def run(env: BenchEnv) -> list[Row]:
    from zonesync.dal import Guard, ZoneDB
    from zonesync.dal.kv import KvGuard
    from zonesync.dev import env as dev_env
    from zonesync.meta.store import MetaStore
    from zonesync.runtime.kv_endpoint import KvEndpoint, parse_repos
    from zonesync.tagging.rules import parse

    dev_env.up_kv(env.cfg)
    dev_env.up_zone_bookkeeping(env.cfg)  # the tag store (idempotent)
    meta = dev_env.meta_config(env.cfg)
    MetaStore(meta).publish_tags(parse(TAGS), "bench: KV patterns")
    zone = env.cfg.zone("a")
    ep = KvEndpoint("a", "127.0.0.1", zone.kv_port, parse_repos("sessions=0"))
    guard = Guard(meta, "a", ZoneDB("127.0.0.1", zone.port, "root", "", "zonesync_app")).start()
    kv, client = KvGuard(guard, ep), ep.connect("sessions")
    plain, guarded, tagged = [], [], []
    try:
        for rep in range(REPS):
            ops = _ops(rep)
            _clear(env, client)
            plain.append(_plain(client, ops))
            _clear(env, client)
            guarded.append(_guarded(kv, ops))
            tagged.append(_tagger(env, ep, meta, len(ops)))
            print(f"  kv rep {rep + 1}: plain {plain[-1]:,.0f}/s, guarded {guarded[-1]:,.0f}/s, "
                  f"tagger {tagged[-1]:,.0f} entries/s", flush=True)  # fmt: skip
        _clear(env, client)
    finally:
        kv.close()
        guard.close()
        client.close()
    return [
        Row("KV guard writes (worst of 3)", min(guarded), max(plain), "w/s", 0.5,
            f"a plain SET/DEL per key on the same Redis, best of {REPS}"),
        Row("KV tagger entries (worst of 3)", min(tagged), max(guarded), "e/s", 1.0,
            f"the KV guard's write rate, best of {REPS}"),
    ]  # fmt: skip
