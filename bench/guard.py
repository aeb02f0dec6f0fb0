"""Guard overhead: single-row transactions through the guard vs a raw connection.

Both sides run the same workload on the same zone: 3,000 transactions of one
INSERT and 3,000 of one UPDATE by primary key, each committed. The guard adds
the ZSID decision, the bookkeeping columns, the FOR UPDATE read of updates and
the commit-time recheck under its lock. Target: >= 0.5x the raw rate.
"""

from __future__ import annotations

import time

from bench.harness import BenchEnv, Row
from zonesync.dal import Guard, ZoneDB
from zonesync.dev import env as dev_env
from zonesync.meta.store import MetaStore
from zonesync.rules import parse

N = 3000
RULES = {
    "zsid_space": {"min": 0, "max": 1023},
    "rules": [{"zsids": "0-1023", "zone": "a"}],
    "tables": {"tenants": {"column": "tenant_id", "function": "modulo", "buckets": 1024}},
}


def _raw(env: BenchEnv) -> float:
    conn = env.instances["a"].connect("zonesync_app")
    conn.autocommit(False)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM tenants")
        conn.commit()
        started = time.perf_counter()
        for i in range(N):
            cur.execute(
                "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, %s, 1, %s)", (i, "t", i)
            )
            conn.commit()
        for i in range(N):
            cur.execute("UPDATE tenants SET name = %s WHERE tenant_id = %s", ("u", i))
            conn.commit()
        elapsed = time.perf_counter() - started
    conn.close()
    return 2 * N / elapsed


def _guarded(env: BenchEnv) -> float:
    meta = dev_env.meta_config(env.cfg)
    MetaStore(meta).publish_rules(parse(RULES), "bench")
    inst = env.instances["a"]
    guard = Guard(meta, "a", ZoneDB("127.0.0.1", inst.port, "root", "", "zonesync_app"), period=1.0).start()
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("DELETE FROM tenants")
    started = time.perf_counter()
    for i in range(N):
        with guard.transaction() as tx:
            tx.insert("tenants", {"tenant_id": i, "name": "t"})
    for i in range(N):
        with guard.transaction() as tx:
            tx.update("tenants", {"tenant_id": i}, {"name": "u"})
    elapsed = time.perf_counter() - started
    guard.close()
    return 2 * N / elapsed


def run(env: BenchEnv) -> list[Row]:
    dev_env.up_meta(env.cfg)
    dev_env.up_zone_bookkeeping(env.cfg)
    baseline = _raw(env)
    return [
        Row(
            "guard: single-row txns (insert + update)",
            _guarded(env),
            baseline,
            "t/s",
            0.5,
            "the same transactions on a raw pymysql connection",
        )
    ]
