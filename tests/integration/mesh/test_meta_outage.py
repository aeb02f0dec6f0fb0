"""Seed S003-03 (node 一旦启动了同步任务后，无论 manager 是否可用，不能影响正常同步): with the
meta store unreachable, running replicators and appliers keep moving data; checkpoints
and lag are written again once it is back."""

from __future__ import annotations

import time

import pytest

from tests.support.replication import Cluster, insert_tenants, latest_checkpoint, reset_state
from tests.support.tcp_proxy import TcpProxy
from zonesync.meta.db import MetaConfig

pytestmark = pytest.mark.integration


def _wait_rows(inst, count: int, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with inst.connect("zonesync_app").cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM tenants")
            if cur.fetchone()[0] >= count:
                return
        assert time.monotonic() < deadline, why
        time.sleep(0.1)


def _lag_updated_at(meta, target: str):
    rows, _ = meta.run("SELECT MAX(updated_at) FROM apply_lag WHERE target_zone = %s", (target,))
    return rows[0][0]


def test_replication_goes_on_while_meta_is_unreachable(meta, zones, broker, test_cfg):
    reset_state(zones, meta)
    proxy = TcpProxy(meta.port).start()
    via_proxy = MetaConfig(meta.host, proxy.port, meta.user, meta.password, meta.database)
    cluster = Cluster(zones, via_proxy, broker, test_cfg.broker_file, partitions=2)
    conn = zones["a"].connect()
    conn.autocommit(True)
    try:
        cluster.start(which=("replicator",), zones=("a",))
        cluster.start(which=("applier",), zones=("b",))
        cluster.wait_started()
        insert_tenants(conn, 1, 20)
        _wait_rows(zones["b"], 20, 15, "zone b did not get the rows written before the outage")
        time.sleep(1.5)  # a checkpoint and a lag report after them
        before = latest_checkpoint(meta, "a")
        lag_before = _lag_updated_at(meta, "b")

        proxy.cut()
        insert_tenants(conn, 21, 30)
        _wait_rows(zones["b"], 50, 15, "nothing flowed while meta was unreachable")
        assert latest_checkpoint(meta, "a").lsn == before.lsn, "no checkpoint could be saved meanwhile"

        proxy.restore()
        deadline = time.monotonic() + 10
        while latest_checkpoint(meta, "a").lsn <= before.lsn or _lag_updated_at(meta, "b") <= lag_before:
            assert time.monotonic() < deadline, "checkpoints and lag were not written again after the outage"
            time.sleep(0.1)
        holder = meta.run("SELECT holder FROM replicator_leases WHERE zone = 'a'")[0]
        assert holder == [(cluster.replicators["a"].lease.holder,)], "the same replicator went on"
    finally:
        if proxy._listener is None:
            proxy.restore()
        cluster.stop()
        proxy.cut()
        conn.close()
    with zones["b"].connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(_zs_version) FROM tenants")
        assert cur.fetchone() == (50, sum(t + 1 for t in range(1, 51)))
    reset_state(zones, meta)
