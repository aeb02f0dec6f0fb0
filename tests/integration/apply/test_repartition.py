"""S002-08: the change topics' partition count changes only when nothing is in flight.

`zonesync topics repartition --partitions N` is refused, changing nothing, while a worker
runs or while a zone has not applied another zone's events up to its last checkpoint (the
seed's 危险操作: dropped before replication completes, the zones would diverge). Once
drained, every zone's chain restarts at its last checkpoint's position (epoch 1), every
apply position starts over, and workers with the new count (on re-created topics) carry
on: rows written before and after replicate, nothing is seen as a gap, per-key order
holds (each key updated in both epochs ends at its last value), and every event of the
new epoch is applied once (reconcile)."""

from __future__ import annotations

import pytest

from tests.support.background import wait_until
from tests.support.replication import Cluster, alerts, checksum, insert_tenants, reset_state, settled_reconciliation
from zonesync import cli
from zonesync.apply.tools.progress import STALE_AFTER_S
from zonesync.apply.tools.reconcile import OK
from zonesync.capture.checkpoints import CheckpointStore

pytestmark = pytest.mark.integration


def _latest(meta, zone: str):
    store = CheckpointStore(meta, zone)
    try:
        return store.latest()
    finally:
        store.close()


def _update(conn, first: int, count: int, name: str, version: int) -> None:
    with conn.cursor() as cur:
        for tenant in range(first, first + count):
            cur.execute(
                "UPDATE zonesync_app.tenants SET name = %s, _zs_version = %s WHERE tenant_id = %s",
                (name, version + tenant, tenant),
            )


def _repartition(capsys, partitions: int, idle: bool = True) -> tuple[int, str]:
    """`zonesync topics repartition`, once stopped appliers' last lag reports are stale (an
    applier that reported within STALE_AFTER_S counts as running)."""
    if idle:
        wait_until(lambda: not meta_fresh_reports(), STALE_AFTER_S + 10, "stopped appliers' reports go stale")
    code = cli.main(["topics", "repartition", "--partitions", str(partitions)])
    out = capsys.readouterr()
    return code, out.out + out.err


def meta_fresh_reports() -> list:
    from zonesync.meta.db import MetaConfig

    rows, _ = MetaConfig.from_env().run(
        "SELECT target_zone FROM apply_lag WHERE updated_at > NOW(6) - INTERVAL %s SECOND", (STALE_AFTER_S,)
    )
    return rows


def _equal(zones) -> bool:
    return checksum(zones["a"]) == checksum(zones["b"]) == checksum(zones["c"])


def test_repartition_is_refused_until_drained_then_the_chains_restart(meta, zones, broker, test_cfg, capsys):
    reset_state(zones, meta)
    a = zones["a"].connect()
    a.autocommit(True)
    old = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=2)
    try:
        old.start(which=("replicator",), zones=("a",))
        old.start(which=("applier",), zones=("b", "c"))
        old.wait_started()
        insert_tenants(a, 1, 40)
        wait_until(lambda: _equal(zones), 30, "b and c have a's first rows")

        # refused while workers run
        code, out = _repartition(capsys, 3, idle=False)
        assert code == 1 and "workers are running" in out and "zone a's replicator" in out, out

        # refused while c is behind a's checkpoint
        old.stop("applier-c")
        _update(a, 1, 20, "before", 1000)
        wait_until(lambda: checksum(zones["b"]) == checksum(zones["a"]), 30, "b applies a's updates")
        wait_until(lambda: _latest(meta, "a").published_hwm > 0, 10, "a's checkpoint covers them")
        old.stop()
        before = _latest(meta, "a")
        code, out = _repartition(capsys, 3)
        assert code == 1 and "zone c has not applied zone a's events" in out, out
        assert meta.run("SELECT partitions, epoch FROM change_topics WHERE zone = 'a'")[0] == [(2, 0)]
        assert _latest(meta, "a").partition_lsns == before.partition_lsns, "nothing changed"

        # drained: c catches up on the old topics, then everything stops
        old.start(which=("applier",), zones=("c",))
        wait_until(lambda: _equal(zones), 30, "c catches up")
        old.stop()
        code, out = _repartition(capsys, 3)
        assert code == 0, out
        assert f"zone a: its chains restart at {before.log_file}:{before.log_pos}" in out, out
        assert meta.run("SELECT partitions, epoch FROM change_topics WHERE zone = 'a'")[0] == [(3, 1)]
        restarted = _latest(meta, "a")
        assert (restarted.log_file, restarted.log_pos, restarted.partition_lsns) == (
            before.log_file,
            before.log_pos,
            {},
        )
        for z in ("b", "c"):
            with zones[z].connect().cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM zonesync.apply_state")
                assert cur.fetchone()[0] == 0, f"zone {z}'s positions start over"

        # the old count is refused now; the new one (on re-created topics) carries on
        with pytest.raises(Exception, match="published with 3 partitions"):
            old.make_applier("b").run(max_seconds=10)
        new = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=3)
        try:
            new.start(which=("replicator",), zones=("a",))
            new.start(which=("applier",), zones=("b", "c"))
            new.wait_started()
            _update(a, 1, 40, "after", 5000)  # keys updated in both epochs
            insert_tenants(a, 100, 20)
            wait_until(lambda: _equal(zones), 30, "b and c follow the new epoch")
            with zones["b"].connect().cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM zonesync_app.tenants WHERE name = 'after'")
                assert cur.fetchone()[0] == 40, "every key ends at its last value"
            for target in ("b", "c"):
                rows = settled_reconciliation(meta, zones, target, ["a"], timeout=20)
                assert rows and all(r.status == OK for r in rows), rows
            assert meta.run("SELECT COUNT(*) FROM resend_requests")[0] == [(0,)], "no gap seen"
            for z in ("b", "c"):
                assert alerts(meta, z, "partition_halted") == [] and alerts(meta, z, "row_locked") == []
        finally:
            new.stop()
    finally:
        old.stop()
        a.close()
        reset_state(zones, meta)
