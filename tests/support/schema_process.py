"""The schema_change DAG's preflight and apply steps in their own process, for kill -9 tests.

    python -m tests.support.schema_process SQL ZONE=PORT...
(meta from ZONESYNC_META_URL; the zones in the order given). Prints "applied ZONE" or
"already ZONE" after each zone, and "waiting ZONE" before a zone's wait for the appliers.
`spawn()` starts one from a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pymysql

from zonesync.meta.db import MetaConfig
from zonesync.schema import steps

REPO = Path(__file__).resolve().parents[2]


def spawn(meta, zones, sql: str, order: list[str]) -> subprocess.Popen:
    from tests.support.rules import meta_url

    env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}
    ports = [f"{z}={zones[z].port}" for z in order]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.schema_process", sql, *ports],
        cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


if __name__ == "__main__":
    sql, ports = sys.argv[1], dict(arg.split("=") for arg in sys.argv[2:])
    ctx = steps.SchemaChangeContext(
        MetaConfig.from_env(), "kill-test", steps.SchemaChangeRequest(sql, tuple(ports), "test: in a process", 3600.0),
        lambda z: pymysql.connect(host="127.0.0.1", port=int(ports[z]), user="root", database="zonesync_app"),
    )  # fmt: skip
    plan = steps.preflight(ctx, lambda zones: 0.0)
    for zone in plan["zones"]:
        print(f"waiting {zone}", flush=True)
        print(f"{steps.apply(ctx, zone, plan['table'], plan['wanted'])} {zone}", flush=True)
