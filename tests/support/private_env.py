"""A private `zonesync dev up` for an e2e test: its own state dir and ports, workers as
real processes, no Airflow; always taken down again."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from zonesync import config
from zonesync.dev import procs

ZS = str(Path(sys.executable).parent / "zonesync")


@contextlib.contextmanager
def private_dev_env(state_dir: Path, ports: int = 9, partitions: int = 4, **settings: str):
    """(env, EnvConfig) of an environment up with the sample schema; `ports` free ports from
    its base (meta, zones, their Redis at base + 6..8; more for replicas at base + 31..),
    `settings` more ZONESYNC_* variables."""
    base = procs.free_port_block(ports)
    env = {
        **os.environ,
        "ZONESYNC_STATE_DIR": str(state_dir),
        "ZONESYNC_BASE_PORT": str(base),
        "ZONESYNC_KV_BASE_PORT": str(base + 5),
        "ZONESYNC_WITH_AIRFLOW": "0",
        "ZONESYNC_KAFKA_PARTITIONS": str(partitions),
        **settings,
    }
    try:
        result = subprocess.run([ZS, "dev", "up", "--sample"], env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        yield env, config.load(env)
    finally:
        subprocess.run([ZS, "dev", "down"], env=env, capture_output=True, timeout=120)
