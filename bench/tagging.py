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
"""

from __future__ import annotations

import os
import random
import time

from bench.harness import BenchEnv, Row
from zonesync.tagging.rules import parse

TAG_PATTERNS = int(os.environ.get("ZONESYNC_BENCH_TAG_PATTERNS", 10_000))
TAG_KEYS = 20_000
REPS = 3


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


def run(env: BenchEnv) -> list[Row]:
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
