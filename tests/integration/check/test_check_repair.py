"""A check's repair against real zones: every kind of injected difference set to its
owner's row (changed values, NULL vs '', a shifted TIMESTAMP, a BLOB byte, a deleted
row, an extra row, the origin alone), a row written since the check left alone, and a
second check finds the zones equal."""

from __future__ import annotations

import time

import pytest

from spark_jobs import consistency_check
from tests.integration.check.conftest import context, job_args, sql
from tests.integration.check.test_consistency_check import EXPECTED, inject
from zonesync.check import report, steps
from zonesync.check.store import CheckStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_repair_sets_every_differing_row_to_its_owners_and_leaves_newer_writes(spark, zones, meta, types_table,
                                                                               tmp_path):  # fmt: skip
    types_table(3000)
    ctx = context(meta, zones, "chk-repair", repair=True)
    steps.preflight(ctx)
    steps.record_start(ctx)
    inject(zones)
    result = consistency_check.run(spark, job_args(meta, zones, tmp_path, "chk-repair"))
    assert {d["key"] for d in CheckStore(meta).diffs("chk-repair")} == set(EXPECTED)
    # after the check, before the repair: b writes id 10 anew (a version above the cut)
    newer = int(time.time() * 1_000_000) + 5_000_000
    sql(zones["b"], f"UPDATE check_types SET name = 'newer', _zs_version = {newer} WHERE id = 10")

    counts = steps.repair(ctx)
    outcomes = {d["key"]: d["repair"] for d in CheckStore(meta).diffs("chk-repair")}
    assert outcomes == {
        "[10]": "left: written in this zone since the check",
        "[500]": "inserted",  # deleted in c
        "[5000]": "deleted",  # only in a; c owns it and has no row
        **{k: "updated" for k in ("[20]", "[30]", "[40]", "[41]", "[50]", "[60]", "[70]")},
    }
    assert counts == {"updated": 7, "inserted": 1, "deleted": 1, "left: written in this zone since the check": 1}
    # the extra row's delete keeps a late replay of it away
    assert sql(zones["a"], "SELECT version FROM zonesync.tombstones WHERE table_name = 'check_types' "
                           "AND pk = '[5000]'", fetch=True) == ((6001,),)  # fmt: skip
    run = steps.finish(ctx, result)
    assert run.status == "differences" and "9 of them repaired" in run.detail
    assert steps.repair(ctx) == counts  # a retried step repairs nothing twice
    shown = report.text(report.build(meta, "chk-repair"))
    assert "check_types [500] (ZSID 500, right: b): c: missing -> repair: inserted" in shown
    assert "<td>deleted</td>" in report.page(report.build(meta, "chk-repair"))

    # the zones hold the same rows again, but id 10 (b's newer write, which replication
    # would carry; here nothing replicates, so it stays a difference)
    sql(zones["b"], "UPDATE check_types SET name = 'name 10', _zs_version = 1010 WHERE id = 10")
    after = context(meta, zones, "chk-after-repair")
    steps.preflight(after)
    steps.record_start(after)
    done = steps.finish(after, consistency_check.run(spark, job_args(meta, zones, tmp_path, "chk-after-repair")))
    assert CheckStore(meta).diffs("chk-after-repair") == [] and done.status == "succeeded", done.detail
