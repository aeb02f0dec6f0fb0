"""A change topic's partition count is fixed for the life of its chains (meta `change_topics`).

A key's partition is crc32 mod the count: run with another count, a replicator would
move keys to other partitions mid-chain and an applier would skip partitions. Both
refuse to start instead, saying which setting to use.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from tests.support.replication import Cluster, reset_state
from zonesync.config import ConfigError
from zonesync.meta import topics

pytestmark = pytest.mark.integration


def test_workers_refuse_another_partition_count(meta, zones, broker, test_cfg):
    reset_state(zones, meta)
    try:
        first = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=2)
        first.start(which=("replicator",), zones=("a",))
        first.wait_started()
        first.stop()
        assert meta.run("SELECT partitions FROM change_topics WHERE zone = 'a'")[0] == [(2,)]

        # topics with 3 partitions, but zone a's chain was published with 2: meta says so
        other = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=3)
        # at once, not after retrying: run() would otherwise loop until max_seconds
        with pytest.raises(topics.PartitionCountMismatch, match="ZONESYNC_KAFKA_PARTITIONS=2"):
            other.make_replicator("a").run(max_seconds=30)
        with pytest.raises(topics.PartitionCountMismatch, match="zone a's change topic was published with 2 part"):
            other.make_applier("b").run(max_seconds=30)
        first.make_applier("b").run(max_seconds=1)  # the recorded count runs

        # workers set to 3 on topics the broker has with 2: the broker says so, before meta
        # is asked (a count recorded from a wrong setting would otherwise be insisted on)
        for worker in (first.make_replicator("a"), first.make_applier("b")):
            worker.partitions = 3
            with pytest.raises(topics.PartitionCountMismatch, match="has 2 partitions on the broker"):
                worker.run(max_seconds=30)

        # the command a user runs says it in one line and exits 2 (the session's dev
        # broker made zonesync.a.changes with 8 partitions)
        env = {
            **os.environ,
            "ZONESYNC_STATE_DIR": str(test_cfg.state_dir),
            "ZONESYNC_BASE_PORT": str(test_cfg.meta_port),
            "ZONESYNC_KAFKA_PARTITIONS": "3",
        }
        done = subprocess.run(
            [sys.executable, "-m", "zonesync.cli", "replicate", "--zone", "a"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert "ZONESYNC_KAFKA_PARTITIONS=8" in done.stderr and "Traceback" not in done.stderr
    finally:
        reset_state(zones, meta)


def test_a_chain_older_than_the_record_is_checked_as_far_as_it_can_be(meta):
    meta.run("DELETE FROM change_topics WHERE zone = 'zq'")
    # partitions 0..7 in use prove the count was at least 8
    with pytest.raises(topics.PartitionCountMismatch, match="at least 8 partitions"):
        topics.claim(meta, "zq", 4, [0, 3, 7])
    assert meta.run("SELECT COUNT(*) FROM change_topics WHERE zone = 'zq'")[0] == [(0,)]
    topics.claim(meta, "zq", 8, [0, 3, 7])  # cannot be told from 8: recorded (with a warning)
    topics.check(meta, ["zq", "never-published"], 8)
    with pytest.raises(topics.PartitionCountMismatch, match="ZONESYNC_KAFKA_PARTITIONS=8"):
        topics.check(meta, ["zq"], 16)
    meta.run("DELETE FROM change_topics WHERE zone = 'zq'")


def test_a_meta_store_from_before_the_record_says_to_migrate(meta):
    meta.run("CREATE DATABASE IF NOT EXISTS zonesync_meta_schema4")
    old = dataclasses.replace(meta, database="zonesync_meta_schema4")
    try:
        with pytest.raises(ConfigError, match="run `zonesync meta migrate`"):
            topics.claim(old, "a", 8, [])
        with pytest.raises(ConfigError, match="has no table change_topics"):
            topics.check(old, ["a"], 8)
    finally:
        meta.run("DROP DATABASE zonesync_meta_schema4")
