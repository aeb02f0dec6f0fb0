"""S002-15 / S000-78: a zone added while a, b and c keep writing. `add_zone` fences its
appliers (every partition halted, waiting for its copy) and registers it; an add-zone
copy from a brings it up to date while the others write; after the join it equals them
and follows their writes, and its replicator published nothing the copy brought."""

from __future__ import annotations

import pytest

from tests.integration.copy.test_online_copy import GuardLoad, no_trouble, own_keys, published_keys, run_copy, seed
from tests.support.background import wait_until
from tests.support.replication import ZONES, checksum, wait_converged
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.loop.applier import Applier
from zonesync.apply.loop.settings import ApplierSettings
from zonesync.capture.replicator import Replicator
from zonesync.capture.source import SourceDB
from zonesync.copy import steps
from zonesync.copy.new_zone import add_zone, fence_note
from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync.dev import broker as broker_mod
from zonesync.dev import env, mariadb, procs

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def zone_d(zones, meta, test_cfg):
    """A fourth zone's server (the app's schema only), and no zone d left in meta after."""
    datadir = test_cfg.data_dir / "zone-d-added"
    inst = mariadb.Instance("zone-d-added", procs.free_port(), 104, datadir, gtid_domain_id=4)
    mariadb.start(inst, test_cfg.run_dir, test_cfg.log_dir, test_cfg.data_dir)
    env._run_sql_file(inst, env.SAMPLE_SCHEMA)
    yield inst
    meta.run("DELETE FROM zones WHERE name = 'd'")
    for table in ("replicator_checkpoints", "replicator_leases", "change_topics", "capture_starts"):
        meta.run(f"DELETE FROM {table} WHERE zone = 'd'")
    procs.stop(test_cfg.run_dir, inst.name)


def test_a_zone_added_under_load_joins_the_mesh(cluster, guard_env, zones, meta, spark, tmp_path, clean_copies,
                                                zone_d, test_cfg):  # fmt: skip
    for z, n in (("a", 1200), ("b", 100), ("c", 100)):
        seed(zones, z, own_keys(z, n))
    wait_converged(zones, ("tenants",), timeout=60)
    with pytest.raises(CopyRefused, match="name: zone a is already a member"):
        add_zone(meta, "a", zone_d.connect, cluster.partitions)
    with pytest.raises(CopyRefused, match="name: 'D!' is not a zone name"):
        add_zone(meta, "D!", zone_d.connect, cluster.partitions)
    assert add_zone(meta, "d", zone_d.connect, cluster.partitions) == 4
    with zone_d.connect().cursor() as cur:
        cur.execute("SELECT COUNT(*), MIN(status), MIN(detail) FROM zonesync.apply_state")
        assert cur.fetchone() == (3 * cluster.partitions, "halted", fence_note("d"))

    # d's replicator and applier, on the mesh's topics
    broker_mod.create_topic(test_cfg.broker_file, cluster.topic("d"), cluster.partitions)
    common = dict(partitions=cluster.partitions, bootstrap=cluster.bootstrap, topic_of=cluster.topic)
    source = SourceDB("127.0.0.1", zone_d.port, "root", "", ["zonesync_app"])
    cluster.replicators["d"] = Replicator("d", 4, source, meta, server_id=5004, **common)
    writer = lambda: ZoneWriter("127.0.0.1", zone_d.port, "root", "", "zonesync_app")  # noqa: E731
    cluster.appliers["d"] = Applier("d", list(ZONES), writer, meta, settings=ApplierSettings(), **common)
    cluster._run("replicator-d", cluster.replicators["d"])
    cluster._run("applier-d", cluster.appliers["d"])

    everyone = {**zones, "d": zone_d}
    loads = [GuardLoad(guard_env(z), z, i, old=()) for i, z in enumerate(ZONES)]
    for load in loads:
        load.__enter__()
    try:
        wait_until(lambda: all(ld.transactions >= 20 for ld in loads), 30, "a, b and c write")
        assert checksum(zone_d) == (), "the fenced zone applied something before its copy"
        ctx = steps.CopyContext(
            meta=meta, run_id="add-d", request=CopyRequest("a", "d", (), "add-zone", "test: add zone d"),
            zone_conn=lambda z: everyone[z].connect("zonesync_app"), bootstrap=cluster.bootstrap,
            partitions=cluster.partitions, topic_of=cluster.topic, actor="test",
        )  # fmt: skip
        result = run_copy(ctx, spark, everyone, tmp_path, chunk_rows=250, names=(*ZONES, "d"))
        wait_until(lambda: all(ld.transactions >= 40 for ld in loads), 30, "a, b and c write after the join")
    finally:
        for load in loads:
            load.__exit__(None, None, None)
    members = (*ZONES, "d")
    wait_until(lambda: len({checksum(everyone[z]) for z in members}) == 1, 60, "a, b, c and d hold the same rows")
    assert result["tenants"]["rows"] >= 1400 and ctx.run().status == "succeeded"
    with zone_d.connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.apply_state WHERE status <> 'running'")
        assert cur.fetchone()[0] == 0
    assert published_keys(cluster, "d") == set(), "d published rows the copy brought it"
    no_trouble(meta)
