"""Migration steps in their own process, for kill -9 tests.

    python -m tests.support.migration_process RUN_ID TENANT TO STEPS ZONE=PORT...
(meta from ZONESYNC_META_URL; STEPS comma-separated names of zonesync.migrate.steps).
Prints "done STEP" after each step. `spawn()` starts one from a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from zonesync.dal import ZoneDB
from zonesync.meta.db import MetaConfig
from zonesync.migrate import steps
from zonesync.migrate.request import MigrationRequest

REPO = Path(__file__).resolve().parents[2]


def spawn(meta, zones, run_id: str, tenant: str, to: str, step_names: list[str]) -> subprocess.Popen:
    from tests.support.rules import meta_url

    env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}
    ports = [f"{z}={zones[z].port}" for z in sorted(zones)]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.migration_process", run_id, tenant, to, ",".join(step_names), *ports],
        cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


if __name__ == "__main__":
    run_id, tenant, to, names = sys.argv[1:5]
    ports = dict(arg.split("=") for arg in sys.argv[5:])
    ctx = steps.MigrationContext(
        MetaConfig.from_env(), run_id, MigrationRequest("tenant", tenant, to, "plan1", "test: in a process"),
        lambda z: ZoneDB("127.0.0.1", int(ports[z]), "root", "", "zonesync_app").connect(), actor="test",
        ack_timeout_s=120.0,
    )  # fmt: skip
    for name in names.split(","):
        getattr(steps, name)(ctx)
        print(f"done {name}", flush=True)
