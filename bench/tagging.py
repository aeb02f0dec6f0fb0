"""KV key matching: one repo's radix tree against a regex per pattern, tried in turn.

TAG_PATTERNS (10k by default, `ZONESYNC_BENCH_TAG_PATTERNS`) patterns of four shapes,
each with its own leading text (`svc123:{{tenant}}:{{id}}`, `svc124:last:{{id}}`,
`svc125_{{id}}` with a length, `svc126:{{id}}:v{{ver}}`), registered through the tag
rules' check (no two may match one key: its time is printed); keys drawn from random
patterns, one in ten matching none. zonesync: `PatternTree.identify` over TAG_KEYS keys;
baseline: every pattern's compiled regex tried on a key until one matches (and then the
rest, as a tagger must to see an ambiguous key), on 100 of the keys (it is that slow).
Both must name the same pattern and entity id for every key the baseline saw.
Keys per second, REPS repeats each: the worst of ours against the best of the
baseline's. Target: >= 10x (issue 21).

Then the tagger against the replicator on the same binlog (issue 21: the tagger keeps up
with replication): TAG_ROWS rows (200k, 100-row transactions) written into zone c's
registered table while nothing runs; zone c's replicator (a fresh chain, on a topic of
its own) publishes them, timed from its start to its checkpoint at the binlog's end; then
zone b's tagger tags them, timed from its start to tagged up to the topic's end. Rows per
second each, REPS repeats: the worst of the tagger's against the best of the replicator's.
Target: >= 1.0x. (Zone c's capture is no other bench's: its chain is reset before and
after.)
"""

from __future__ import annotations

import os
import random
import time

from bench.harness import BenchEnv, Row
from bench.harness import run_sql as _sql
from zonesync.dev import env as dev_env
from zonesync.tagging.rules import parse

TAG_PATTERNS = int(os.environ.get("ZONESYNC_BENCH_TAG_PATTERNS", 10_000))
TAG_KEYS = 20_000
REPS = 3
TAG_ROWS = int(os.environ.get("ZONESYNC_BENCH_TAG_ROWS", 200_000))
RATE_DDL = (
    "CREATE TABLE IF NOT EXISTS zonesync_app.bench_tag_rows (id BIGINT PRIMARY KEY, tenant BIGINT NOT NULL, "
    "v VARCHAR(64) NOT NULL, _zs_origin SMALLINT NOT NULL DEFAULT 3, _zs_version BIGINT NOT NULL DEFAULT 1)"
)
RATE_TAGS = {"mysql": [{"repo": "zonesync_app", "table": "bench_tag_rows", "index_keys": ["id"],
                        "entity": {"type": "tenant", "field": "tenant"}}]}  # fmt: skip
CHAIN_TABLES = ("replicator_checkpoints", "capture_starts", "replicator_leases")


def _doc(n: int) -> dict:
    kv = []
    for i in range(n):
        svc = f"svc{i}"
        shape = i % 4
        if shape == 0:
            pattern, where = svc + ":{{tenant}}:{{id}}", {"tenant": {"not_contains": ":"}, "id": {"digits": True}}
        elif shape == 1:
            pattern, where = svc + ":last:{{id}}", {"id": {"digits": True}}
        elif shape == 2:
            pattern, where = svc + "_{{id}}", {"id": {"length": 8}}
        else:
            pattern, where = svc + ":{{id}}:v{{ver}}", {"id": {"not_contains": ":"}, "ver": {"digits": True}}
        kv.append({"repo": "bench", "pattern": pattern, "entity": {"type": "t", "field": "id"}, "where": where})
    return {"kv": kv}


def _key(rng: random.Random, n: int) -> str:
    i = rng.randrange(n)
    if rng.random() < 0.1:
        return f"svc{i}:nothing-here:x"
    ident = str(rng.randrange(10**6))
    return [f"svc{i}:t{rng.randrange(99)}:{ident}", f"svc{i}:last:{ident}", f"svc{i}_{ident:0>8}",
            f"svc{i}:{ident}:v{rng.randrange(9)}"][i % 4]  # fmt: skip


def _regex_loop(compiled, key: str):
    found = []
    for pattern, regex in compiled:
        values = pattern.regex_match(regex, key)
        if values is not None:
            found.append((pattern.text, values[pattern.entity_field]))
    return found


def _matching() -> list[Row]:
    started = time.perf_counter()
    tags = parse(_doc(TAG_PATTERNS), "bench tags")
    registered = time.perf_counter() - started
    tree = tags.trees()["bench"]
    print(f"{TAG_PATTERNS} patterns registered (no two matching one key) in {registered:.2f} s")
    rng = random.Random(21)
    keys = [_key(rng, TAG_PATTERNS) for _ in range(TAG_KEYS)]
    sample = keys[:100]  # the baseline's keys
    compiled = [(p, p.regex()) for p in tags.kv]
    for key in sample:
        ours = tree.identify(key)
        theirs = _regex_loop(compiled, key)
        assert [(ours[0].text, ours[1])] == theirs if ours else theirs == [], (key, ours, theirs)
    rates, baseline = [], []
    for rep in range(REPS):
        t = time.perf_counter()
        for key in keys:
            tree.identify(key)
        rates.append(len(keys) / (time.perf_counter() - t))
        t = time.perf_counter()
        for key in sample:
            _regex_loop(compiled, key)
        baseline.append(len(sample) / (time.perf_counter() - t))
        print(f"repeat {rep + 1}/{REPS}: radix tree {rates[-1]:,.0f} keys/s, "
              f"regex per pattern {baseline[-1]:,.0f} keys/s")  # fmt: skip
    return [
        Row(f"tag: KV keys vs {TAG_PATTERNS} patterns (worst of {REPS})", min(rates), max(baseline), "keys/s", 10.0,
            f"a regex per pattern tried in turn, best of {REPS}; {len(sample)} of the keys, same answers"),
    ]  # fmt: skip


def _rate_once(env: BenchEnv, meta, rep: int) -> tuple[float, float]:
    """(replicator rows/s, tagger rows/s) of one repeat."""
    import threading
    import uuid

    from zonesync.capture.checkpoints import CheckpointStore
    from zonesync.capture.replicator import Replicator
    from zonesync.capture.source import SourceDB
    from zonesync.capture.start import bootstrap
    from zonesync.dev import broker as broker_mod
    from zonesync.tagging.tag_store import TagStore, load_connection
    from zonesync.tagging.tagger import Tagger, topic_ends

    c, b, cfg = env.instances["c"], env.instances["b"], env.cfg
    for t in CHAIN_TABLES:
        meta.run(f"DELETE FROM {t} WHERE zone = 'c'")
    _sql(b, "DELETE FROM zonesync.tag_segments", "DELETE FROM zonesync.tag_state")
    _sql(c, "SET SESSION sql_log_bin = 0", "TRUNCATE zonesync_app.bench_tag_rows")
    start = _sql(c, "SHOW MASTER STATUS")[0][:2]
    conn = c.connect("zonesync_app")
    conn.autocommit(False)
    now = time.time_ns() // 1000
    with conn.cursor() as cur:
        for lo in range(0, TAG_ROWS, 100):
            cur.executemany("INSERT INTO bench_tag_rows (id, tenant, v, _zs_version) VALUES (%s, %s, %s, %s)",
                            [(i, i % 1000, f"payload-{i}", now + i) for i in range(lo, lo + 100)])  # fmt: skip
            conn.commit()
    conn.close()
    end = _sql(c, "SHOW MASTER STATUS")[0][:2]
    prefix = f"benchtag{uuid.uuid4().hex[:6]}"

    def topic_of(z):
        return f"{prefix}.zonesync.{z}.changes"

    broker_mod.create_topic(cfg.broker_file, topic_of("c"), cfg.kafka_partitions)
    bootstrap(meta, "c", start[0], int(start[1]), "bench: the tagger's rate")

    def boot():
        return broker_mod.read_info(cfg.broker_file)["bootstrap"]

    source = SourceDB("127.0.0.1", c.port, "root", "", ["zonesync_app"])
    replicator = Replicator("c", 3, source, meta, server_id=5900 + rep, partitions=cfg.kafka_partitions,
                            bootstrap=boot, topic_of=topic_of)  # fmt: skip
    store, started = CheckpointStore(meta, "c"), time.perf_counter()
    runner = threading.Thread(target=replicator.run, daemon=True)
    runner.start()
    try:
        while True:
            cp = store.latest()
            if cp is not None and (cp.log_file, cp.log_pos) >= (end[0], int(end[1])):
                break
            assert time.perf_counter() - started < 600, "the replicator did not reach the binlog's end in 600 s"
            time.sleep(0.02)
        replicated = time.perf_counter() - started
    finally:
        replicator.stop()
        runner.join(30)
        store.close()
    ends = topic_ends(boot(), topic_of, ["c"], cfg.kafka_partitions)
    tagger = Tagger("b", ["c"], lambda: load_connection("127.0.0.1", b.port, "root", "", "zonesync_app"),
                    "zonesync_app", meta, cfg.kafka_partitions, bootstrap=boot, topic_of=topic_of)  # fmt: skip
    tags = TagStore(lambda: b.connect("zonesync_app"), "zonesync_app")
    watch = b.connect("zonesync_app")  # one connection, as the replicator's checkpoint store keeps

    def caught_up() -> bool:
        with watch.cursor() as cur:
            cur.execute("SELECT source_zone, partition_no, kafka_offset FROM zonesync.tag_state")
            done = {(s, int(p)): int(o) for s, p, o in cur.fetchall()}
        return all(done.get(key, -1) >= last for key, last in ends.items() if last >= 0)

    started = time.perf_counter()
    runner = threading.Thread(target=tagger.run, daemon=True)
    runner.start()
    try:
        while not caught_up():
            assert time.perf_counter() - started < 600, "the tagger did not catch up in 600 s (its log says why)"
            time.sleep(0.02)
        tagged = time.perf_counter() - started
    finally:
        tagger.stop()
        runner.join(30)
        watch.close()
    count = sum(1 for t in tags.dump() if t[0] == "bench_tag_rows" and not t[5])
    assert count == TAG_ROWS, f"{count} tags for {TAG_ROWS} rows"
    return TAG_ROWS / replicated, TAG_ROWS / tagged


def _rate(env: BenchEnv) -> list[Row]:
    from zonesync.meta.store import MetaStore

    cfg = env.cfg
    dev_env.up_meta(cfg)
    dev_env.up_zone_bookkeeping(cfg)
    meta = dev_env.meta_config(cfg)
    MetaStore(meta).publish_tags(parse(RATE_TAGS), "bench: the tagger's table")
    for inst in (env.instances["c"], env.instances["b"]):
        _sql(inst, "SET SESSION sql_log_bin = 0", RATE_DDL)
    reps, tagged = [], []
    try:
        for rep in range(REPS):
            r, t = _rate_once(env, meta, rep)
            reps.append(r)
            tagged.append(t)
            print(f"repeat {rep + 1}/{REPS}: replicator {r:,.0f} rows/s, tagger {t:,.0f} rows/s ({t / r:.2f}x)")
    finally:
        for t in CHAIN_TABLES:
            meta.run(f"DELETE FROM {t} WHERE zone = 'c'")
    return [Row(f"tag: tagger vs replicator, {TAG_ROWS // 1000}k rows (worst of {REPS})", min(tagged), max(reps),
                "rows/s", 1.0, f"zone c's replicator on the same binlog, best of {REPS}")]  # fmt: skip


def run(env: BenchEnv) -> list[Row]:
    return _matching() + _rate(env)
