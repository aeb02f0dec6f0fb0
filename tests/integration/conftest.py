"""Fixtures of the integration tests: baseline rules, guards, clean tables."""

from __future__ import annotations

import pytest

from tests.support.rules import rules_doc
from zonesync.dal import Guard, ZoneDB
from zonesync.meta import guards
from zonesync.meta.store import MetaStore


@pytest.fixture
def guard_env(meta, zones):
    """Baseline rules published, tables empty, no guard left registered afterwards."""
    for name in ("a", "b", "c"):
        with zones[name].connect("zonesync_app").cursor() as cur:
            cur.execute("DELETE FROM orders")
            cur.execute("DELETE FROM tenants")
    for g in guards.list_instances(meta):
        guards.forget(meta, g.instance_id, "test setup")
    MetaStore(meta).publish_rules(rules_doc(), "test baseline")
    started: list[Guard] = []

    def make(zone: str, period: float = 0.5, poll: float = 0.05, lease: float | None = None, meta_cfg=None, clock=None):
        db = ZoneDB("127.0.0.1", zones[zone].port, "root", "", "zonesync_app")
        g = Guard(meta_cfg or meta, zone, db, period=period, poll=poll, lease=lease, clock=clock).start()
        started.append(g)
        return g

    yield make
    for g in started:
        g.close()
    for g in guards.list_instances(meta):
        guards.forget(meta, g.instance_id, "test teardown")


@pytest.fixture
def cluster(meta, zones, broker, test_cfg, guard_env):
    """Replication between zones a, b, c on fresh private topics; baseline rules; guards via
    guard_env; the appliers check events' owners against the rules (owner_history.py)."""
    from tests.support.replication import Cluster, reset_state

    reset_state(zones, meta)
    c = Cluster(zones, meta, broker, test_cfg.broker_file, check_owners=True)
    c.start()
    c.wait_started()
    yield c
    c.stop()


@pytest.fixture
def zone_a_alone(meta, zones, broker, test_cfg):
    """(an autocommit connection to zone a, a 2-partition cluster on fresh topics with no
    worker started), from and back to clean replication state: for tests that run zone
    a's replicator on its own."""
    from tests.support.replication import Cluster, reset_state

    reset_state(zones, meta)
    conn = zones["a"].connect()
    conn.autocommit(True)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=2)
    yield conn, cluster
    cluster.stop()
    conn.close()
    reset_state(zones, meta)


@pytest.fixture
def cli_on_cluster(cluster, monkeypatch):
    """The command line reads the cluster's private topics, partitioned as the cluster is."""
    from zonesync.runtime import transport

    monkeypatch.setattr(transport, "topic", cluster.topic)
    monkeypatch.setenv("ZONESYNC_KAFKA_PARTITIONS", str(cluster.partitions))
    return cluster


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    """A Spark standalone cluster (master and worker on 127.0.0.1) for the jobs' cluster tests."""
    from tests.support.spark_cluster import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone")).start()
    yield cluster
    cluster.stop()
