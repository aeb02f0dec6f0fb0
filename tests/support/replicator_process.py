"""A zone's replicator as a process of its own, with a test Cluster's parameters, for tests
that kill -9 it.

`spawn` starts `python -m tests.support.replicator_process SPEC`; the child builds the
same Replicator as `Cluster.make_replicator` (private topic, server_id, meta, broker) and
runs it until SIGTERM or SIGKILL. `throttle` sleeps that long after each partition's queue
the replicator produces (a message or a few): a transaction of a few hundred-event
messages then takes long enough to publish that a test can kill the process part-way
through it. `large_txn_rows` lowers the large-transaction limit. Nothing else changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def spawn(
    cluster, zone: str, log_path: Path, throttle: float = 0.0, large_txn_rows: int | None = None
) -> subprocess.Popen:
    from tests.support.replication import ZONE_IDS

    spec = {
        "zone": zone,
        "zone_id": ZONE_IDS[zone],
        "port": cluster.zones[zone].port,
        "meta": dataclasses.asdict(cluster.meta),
        "broker_file": str(cluster.broker_file),
        "topic": cluster.topic(zone),
        "partitions": cluster.partitions,
        "server_id": 5000 + ZONE_IDS[zone],
        "throttle": throttle,
        "large_txn_rows": large_txn_rows,
    }
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.replicator_process", json.dumps(spec)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill(proc: subprocess.Popen) -> None:
    """kill -9, and reap it (a zombie still counts as a live lease holder)."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def stop(proc: subprocess.Popen) -> None:
    """Stop it cleanly if it still runs (SIGTERM, then SIGKILL after 15 s)."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        kill(proc)


@contextlib.contextmanager
def mesh(meta, zones, broker, test_cfg, tmp_path: Path, partitions: int, tail: int = 30):
    """(a Cluster on fresh topics with no worker started, a list for the replicator processes
    the test spawns, their log file), from and back to clean replication state; at the end
    the processes are stopped and the log's last `tail` lines printed."""
    from tests.support.replication import Cluster, reset_state

    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=partitions)
    started: list[subprocess.Popen] = []
    log = tmp_path / "replicator-a.log"
    try:
        yield cluster, started, log
    finally:
        for proc in started:
            stop(proc)
        cluster.stop()
        reset_state(zones, meta)
        if log.exists():
            print("replicator-a log (tail):\n" + "\n".join(log.read_text().splitlines()[-tail:]))


def main(spec: dict) -> None:
    from zonesync.capture import delivery
    from zonesync.capture.replicator import Replicator
    from zonesync.capture.source import SourceDB
    from zonesync.dev import broker as broker_mod
    from zonesync.meta.db import MetaConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(message)s")
    throttle = spec["throttle"]
    if throttle:
        produce = delivery.Delivery.produce

        def throttled(self, partition, events):  # every queue the replicator sends, then a pause
            produce(self, partition, events)
            time.sleep(throttle)

        delivery.Delivery.produce = throttled

    broker_file = Path(spec["broker_file"])
    replicator = Replicator(
        spec["zone"],
        spec["zone_id"],
        SourceDB("127.0.0.1", spec["port"], "root", "", ["zonesync_app"]),
        MetaConfig(**spec["meta"]),
        server_id=spec["server_id"],
        partitions=spec["partitions"],
        bootstrap=lambda: broker_mod.read_info(broker_file)["bootstrap"],
        topic_of=lambda zone: spec["topic"],
    )
    if spec.get("large_txn_rows"):
        replicator.large_txn_rows = spec["large_txn_rows"]
    signal.signal(signal.SIGTERM, lambda *_: replicator.stop())
    replicator.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
