"""A tagger of one of a Cluster's zones in its own process, for kill -9 tests.

    python -m tests.support.tagger_process ZONE DB_PORT PARTITIONS TOPIC_PREFIX BROKER_FILE
(meta from ZONESYNC_META_URL; sources are every zone of tests.support.replication).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path


def spawn(cluster, zone: str, log_path: Path) -> subprocess.Popen:
    from tests.support.applier_process import spawn_worker

    return spawn_worker("tests.support.tagger_process", cluster, zone, log_path)


if __name__ == "__main__":
    from tests.support.replication import ZONES
    from zonesync.dev import broker as broker_mod
    from zonesync.meta.db import MetaConfig
    from zonesync.tagging.tag_store import load_connection
    from zonesync.tagging.tagger import Tagger

    logging.basicConfig(level=logging.INFO, format="%(asctime)s child %(name)s: %(message)s")
    zone, port, partitions, prefix, broker_file = sys.argv[1:6]
    tagger = Tagger(
        zone,
        list(ZONES),
        lambda: load_connection("127.0.0.1", int(port), "root", "", "zonesync_app"),
        "zonesync_app",
        MetaConfig.from_env(),
        int(partitions),
        bootstrap=lambda: broker_mod.read_info(Path(broker_file))["bootstrap"],
        topic_of=lambda z: f"{prefix}.zonesync.{z}.changes",
    )
    signal.signal(signal.SIGTERM, lambda *_: tagger.stop())
    tagger.run()
