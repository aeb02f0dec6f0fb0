"""Least privilege for the batch work (issue 24, docs/security.md): the full copy and the
consistency check, their Python steps and their Spark jobs, run under the deployment's
accounts (docker/mariadb/roles.sql): the zones as zs_batch, meta as zs_meta. A copy
rebuilds a wiped zone (stage tables, merge, prune, verify, join) and the check that
follows finds the zones equal, with no right beyond those grants."""

from __future__ import annotations

import pytest

from spark_jobs import consistency_check, full_copy
from tests.integration.check.conftest import job_args
from tests.integration.copy.conftest import copy_args
from tests.integration.copy.test_online_copy import no_trouble, own_keys, seed, wipe
from tests.support import roles
from tests.support.background import wait_until
from tests.support.replication import ZONES, checksum, wait_converged
from zonesync.check import steps as check_steps
from zonesync.check.request import CheckRequest
from zonesync.copy import steps
from zonesync.copy.request import CopyRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_copy_and_a_check_run_as_zs_batch_and_zs_meta(cluster, zones, meta, spark, tmp_path, clean_copies,
                                                         monkeypatch):  # fmt: skip
    roles.install([zones[z] for z in (*ZONES, "meta")])
    batch, meta_role = roles.password("zs_batch"), roles.meta_as(meta)
    for z in ZONES:
        monkeypatch.setenv(f"ZONESYNC_JDBC_PASSWORD_{z.upper()}", batch)
    monkeypatch.setenv("ZONESYNC_META_PASSWORD", meta_role.password)

    def as_batch(args):
        args.zone_user = [f"{z}=zs_batch" for z in ZONES]
        return args

    seed(zones, "a", own_keys("a", 300))
    wait_converged(zones, ("tenants",), timeout=60)
    wipe(zones["b"])
    ctx = steps.CopyContext(
        meta=meta_role, run_id="as-batch", request=CopyRequest("a", "b", ("tenants",), "rebuild", "test: roles"),
        zone_conn=lambda z: roles.connect(zones[z], "zs_batch", "zonesync_app"), bootstrap=cluster.bootstrap,
        partitions=cluster.partitions, topic_of=cluster.topic, actor="test",
    )  # fmt: skip
    steps.preflight(ctx)
    steps.record_start(ctx)
    steps.start_incremental(ctx)
    full_copy.run(spark, as_batch(copy_args(zones, tmp_path, "as-batch", "a", "b", chunk_rows=100)))
    wait_until(lambda: steps.caught_up(ctx), 60, "b caught up", step=0.1)
    steps.prune(ctx)
    steps.verify(ctx)
    steps.join(ctx)
    assert checksum(zones["b"]) == checksum(zones["a"]) and len(checksum(zones["b"])) == 300

    check = check_steps.CheckContext(
        meta_role, "chk-as-batch", CheckRequest(tables=("tenants",), chunk_rows=100, reason="test: roles"),
        lambda z: roles.connect(zones[z], "zs_batch", "zonesync_app"), actor="test",
    )  # fmt: skip
    check_steps.preflight(check)
    check_steps.record_start(check)
    args = as_batch(job_args(meta, zones, tmp_path, "chk-as-batch", tables=["tenants"]))
    args.meta = f"mysql://zs_meta@{meta.host}:{meta.port}/{meta.database}"
    done = check_steps.finish(check, consistency_check.run(spark, args))
    assert done.status == "succeeded", done.detail
    no_trouble(meta)
