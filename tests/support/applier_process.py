"""An applier of one of a Cluster's zones in its own process, for kill -9 tests.

    python -m tests.support.applier_process ZONE DB_PORT PARTITIONS TOPIC_PREFIX BROKER_FILE
(meta from ZONESYNC_META_URL; sources are the other zones of tests.support.replication).
Runs in group mode (a member of the zone's consumer group) until killed, or until SIGTERM
(a clean stop: rounds in flight commit, and it leaves the group).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def spawn(cluster, zone: str, log_path: Path | None = None) -> subprocess.Popen:
    """The group applier of `zone` as a child process; its output goes to `log_path` when
    given (else to this process's)."""
    owners = "1" if cluster.check_owners else "0"
    return spawn_worker("tests.support.applier_process", cluster, zone, log_path, ZONESYNC_APPLY_CHECK_OWNERS=owners)


def spawn_worker(module: str, cluster, zone: str, log_path: Path | None = None, **env) -> subprocess.Popen:
    """`python -m module ZONE DB_PORT PARTITIONS TOPIC_PREFIX BROKER_FILE` for one of the
    cluster's zones, with meta's URL and `env` in its environment (a worker to kill -9)."""
    from tests.support.rules import meta_url

    argv = [sys.executable, "-m", module, zone, str(cluster.zones[zone].port), str(cluster.partitions),
            cluster.prefix, str(cluster.broker_file)]  # fmt: skip
    env = {**os.environ, "ZONESYNC_META_URL": meta_url(cluster.meta), **env}
    if log_path is None:
        return subprocess.Popen(argv, cwd=REPO, env=env)
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


if __name__ == "__main__":
    from tests.support.replication import ZONES
    from zonesync.apply.batch.writer import ZoneWriter
    from zonesync.apply.loop.applier import Applier
    from zonesync.apply.loop.settings import ApplierSettings
    from zonesync.dev import broker as broker_mod
    from zonesync.meta.db import MetaConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s child %(name)s: %(message)s")
    zone, port, partitions, prefix, broker_file = sys.argv[1:6]
    applier = Applier(
        zone,
        [z for z in ZONES if z != zone],
        lambda: ZoneWriter("127.0.0.1", int(port), "root", "", "zonesync_app"),
        MetaConfig.from_env(),
        partitions=int(partitions),
        bootstrap=lambda: broker_mod.read_info(Path(broker_file))["bootstrap"],
        topic_of=lambda z: f"{prefix}.zonesync.{z}.changes",
        settings=ApplierSettings(
            group=True,
            check_owners=os.environ["ZONESYNC_APPLY_CHECK_OWNERS"] == "1",
            drain_batch=int(os.environ.get("ZONESYNC_TEST_DRAIN_BATCH", "2000")),
        ),
    )
    signal.signal(signal.SIGTERM, lambda *_: applier.stop())
    applier.run()
