"""The operator console with a big meta store (issue 23: "it must stay fast with 10k runs
and 1M lag samples in meta").

One page refresh is every read the page makes (`console.js`): zones, rules, lag, the
last hour of lag history, the newest 25 runs, locks, open alerts; plus the runs page
deep in the history (`before=` the 5,000th run). Each is served by the plugin's FastAPI
app in-process (Airflow's authentication replaced: it is the same for both sizes), on
the bench's meta store and zones:

1. baseline: a small meta (100 runs, 6 zone pairs x 1 h of lag samples);
2. zonesync: the same after CONSOLE_RUNS runs (10k) and CONSOLE_SAMPLES lag samples (1M)
   are added.

Refreshes per second, the worst of REPS rounds at the big size against the best at the
small one. Target >= 0.8x: the reads are index ranges, flat in what meta holds.
"""

from __future__ import annotations

import os
import time

from bench.harness import BenchEnv, Row

CONSOLE_RUNS = int(os.environ.get("ZONESYNC_BENCH_CONSOLE_RUNS", 10_000))
CONSOLE_SAMPLES = int(os.environ.get("ZONESYNC_BENCH_CONSOLE_SAMPLES", 1_000_000))
REPS, REFRESHES = 5, 20
PAGE = ["/zones", "/rules", "/lag", "/lag/history?minutes=60", "/runs?limit=25", "/locks", "/alerts?limit=100"]
PAIRS = [(s, t) for s in "abc" for t in "abc" if s != t]
KINDS = (
    ("switches", "(run_id, zsids, from_zone, to_zone, reason, actor, status, created_at)",
     "CONCAT('bench-s{tag}-', seq), '0-9', 'a', 'b', 'r', 't', 'succeeded'"),
    ("copies", "(run_id, source_zone, target_zone, mode, tables_json, reason, actor, status, created_at)",
     "CONCAT('bench-c{tag}-', seq), 'a', 'b', 'rebuild', '[]', 'r', 't', 'succeeded'"),
    ("checks", "(run_id, zones_json, tables_json, chunk_rows, actor, status, created_at)",
     "CONCAT('bench-k{tag}-', seq), '[]', '[]', 1000, 't', 'succeeded'"),
    ("migrations", "(run_id, be_type, be_id, source_zone, target_zone, mode, les_json, reason, actor, status, "
     "created_at)", "CONCAT('bench-m{tag}-', seq), 'tenant', seq, 'a', 'b', 'plan1', '[]', 'r', 't', 'succeeded'"),
)  # fmt: skip


def _fill(meta, runs: int, samples: int, offset: int) -> None:
    """`runs` runs (a quarter of each kind, a second apart, before the existing ones) and
    `samples` lag samples (the six pairs in turn, 10 s apart back from now)."""
    each = runs // len(KINDS)
    for table, columns, values in KINDS:
        meta.run(f"INSERT INTO {table} {columns} SELECT {values.format(tag=offset)}, "
                 f"NOW(6) - INTERVAL {offset} + seq SECOND "
                 f"FROM seq_0_to_{each - 1}")  # fmt: skip
    pairs = " ".join(f"WHEN {i} THEN '{s}'" for i, (s, _) in enumerate(PAIRS))
    targets = " ".join(f"WHEN {i} THEN '{t}'" for i, (_, t) in enumerate(PAIRS))
    meta.run("INSERT IGNORE INTO lag_samples (source_zone, target_zone, bucket, behind_events, behind_seconds) "
             f"SELECT CASE seq % 6 {pairs} END, CASE seq % 6 {targets} END, "
             f"UNIX_TIMESTAMP() DIV 10 * 10 - (seq DIV 6) * 10, seq % 50, (seq % 9) / 1000 "
             f"FROM seq_0_to_{samples - 1}")  # fmt: skip


def _refreshes_per_s(client, deep: str) -> float:
    t0 = time.perf_counter()
    for _ in range(REFRESHES):
        for path in [*PAGE, f"/runs?limit=25&before={deep}"]:
            resp = client.get("/api/v1" + path)
            assert resp.status_code == 200, (path, resp.text)
    return REFRESHES / (time.perf_counter() - t0)


def _rounds(client, meta) -> list[float]:
    rows, _ = meta.run("SELECT created_at FROM switches ORDER BY created_at DESC LIMIT 1 OFFSET %s",
                       (max(0, meta.run("SELECT COUNT(*) FROM switches")[0][0][0] // 2),))  # fmt: skip
    deep = rows[0][0].isoformat()
    _refreshes_per_s(client, deep)  # warm: connections, the plans, the buffer pool
    return [_refreshes_per_s(client, deep) for _ in range(REPS)]


def run(env: BenchEnv) -> list[Row]:
    from fastapi.testclient import TestClient

    from zonesync.dev import env as dev_env
    from zonesync_airflow.api import app
    from zonesync_airflow.api.auth import airflow_user

    meta = dev_env.meta_config(env.cfg)
    cfg = env.cfg
    settings = {"ZONESYNC_DEV": "1", "ZONESYNC_STATE_DIR": str(cfg.state_dir),
                "ZONESYNC_BASE_PORT": str(cfg.meta_port), "ZONESYNC_KV_BASE_PORT": str(cfg.kv_base_port)}  # fmt: skip
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    for table in ("switches", "copies", "checks", "migrations"):
        meta.run(f"DELETE FROM {table} WHERE run_id LIKE 'bench-%'")
    meta.run("DELETE FROM lag_samples")
    meta.run("INSERT IGNORE INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, "
             "behind_seconds) VALUES " + ", ".join(f"('{s}', '{t}', 0, 1, 0, 0)" for s, t in PAIRS))  # fmt: skip
    app.dependency_overrides[airflow_user] = lambda: {"user": "bench"}
    try:
        with TestClient(app) as client:
            _fill(meta, 100, 6 * 360, offset=100)
            small = _rounds(client, meta)
            t0 = time.monotonic()
            meta.run("DELETE FROM lag_samples")
            _fill(meta, CONSOLE_RUNS, CONSOLE_SAMPLES, offset=100 + CONSOLE_RUNS)
            print(f"  console: {CONSOLE_RUNS:,} runs and {CONSOLE_SAMPLES:,} lag samples added in "
                  f"{time.monotonic() - t0:.1f} s", flush=True)  # fmt: skip
            big = _rounds(client, meta)
    finally:
        app.dependency_overrides.clear()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for table in ("switches", "copies", "checks", "migrations"):
            meta.run(f"DELETE FROM {table} WHERE run_id LIKE 'bench-%'")
        meta.run("DELETE FROM lag_samples")
    print(f"  console refreshes/s: small {', '.join(f'{r:.1f}' for r in small)}; "
          f"big {', '.join(f'{r:.1f}' for r in big)}", flush=True)  # fmt: skip
    return [Row("console: page refresh, 10k runs + 1M lag samples", min(big), max(small), "/s", 0.8,
                "the same refresh on a small meta (100 runs, an hour of samples), best of 5")]  # fmt: skip
