"""A guard in its own process, for kill -9 and SIGSTOP tests.

    python -m tests.support.guard_process ZONE PERIOD DB_PORT [--writes]  (meta from ZONESYNC_META_URL)
Prints its instance id once synced, then idles; with --writes it reads one JSON insert a
line from stdin (`{"table": ..., "row": {...}}`), runs it in a guarded transaction and
answers "ok" or the refusal (`WrongZone: ...`). `spawn()` starts one from a test,
`insert()` writes through it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from zonesync.dal import Guard, ZoneDB
from zonesync.meta.db import MetaConfig

REPO = Path(__file__).resolve().parents[2]


def spawn(meta, zones, zone: str, period: float, writes: bool = False) -> tuple[subprocess.Popen, str]:
    """(process, instance id) of a synced guard of `zone` in a child process; `writes`:
    it takes inserts from `insert()`."""
    from tests.support.rules import meta_url

    env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.guard_process", zone, str(period), str(zones[zone].port)]
        + (["--writes"] if writes else []),
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE if writes else None,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


def insert(proc: subprocess.Popen, table: str, row: dict) -> str:
    """One insert through a guard spawned with `writes`: "ok", or its refusal ("WrongZone: ...")."""
    proc.stdin.write(json.dumps({"table": table, "row": row}) + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


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
    if "--writes" in sys.argv[4:]:
        for line in sys.stdin:
            ask = json.loads(line)
            try:
                with guard.transaction() as tx:
                    tx.insert(ask["table"], ask["row"])
                print("ok", flush=True)
            except Exception as exc:  # noqa: BLE001 - the refusal is the answer
                print(f"{type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
    while True:
        time.sleep(1)
