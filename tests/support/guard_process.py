"""A guard in its own process, for kill -9 and SIGSTOP tests.

    python -m tests.support.guard_process ZONE PERIOD DB_PORT  (meta from ZONESYNC_META_URL)
Prints its instance id once synced, then idles. `spawn()` starts one from a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from zonesync.dal import Guard, ZoneDB
from zonesync.meta.db import MetaConfig

REPO = Path(__file__).resolve().parents[2]


def spawn(meta, zones, zone: str, period: float) -> tuple[subprocess.Popen, str]:
    """(process, instance id) of a synced guard of `zone` in a child process."""
    from tests.support.rules import meta_url

    env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.guard_process", zone, str(period), str(zones[zone].port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


if __name__ == "__main__":
    zone, period, db_port = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    guard = Guard(
        MetaConfig.from_env(),
        zone,
        ZoneDB("127.0.0.1", db_port, "root", "", "zonesync_app"),
        period=period,
        poll=min(0.05, period),
    ).start()
    print(guard.instance_id, flush=True)
    while True:
        time.sleep(1)
