"""No false alarm while every zone writes: guarded writes in a, b and c run through the
whole check, replication carries them, and the check reports no difference (the
chunks a write in flight made differ settle, or their keys are left out as written
after the cut); a real difference planted before the check is still found."""

from __future__ import annotations

import time

import pytest

from spark_jobs import consistency_check
from tests.integration.check.conftest import context, job_args
from tests.integration.copy.test_online_copy import GuardLoad, own_keys, seed
from tests.support.background import wait_until
from tests.support.replication import ZONES, wait_converged
from zonesync.check import steps
from zonesync.check.store import CheckStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def no_checks(meta):
    for t in ("check_diffs", "check_chunks", "checks"):
        meta.run(f"DELETE FROM {t}")
    yield
    for t in ("check_diffs", "check_chunks", "checks"):
        meta.run(f"DELETE FROM {t}")


def test_writes_in_every_zone_raise_no_false_difference(cluster, guard_env, zones, meta, spark, tmp_path, no_checks):
    seeded = {z: own_keys(z, n) for z, n in (("a", 1500), ("b", 800), ("c", 800))}
    for z, keys in seeded.items():
        seed(zones, z, keys)
    wait_converged(zones, ("tenants",), timeout=60)
    # the one real difference: b's copy of one of a's rows changed behind replication's back
    planted = seeded["a"][7]
    conn = zones["b"].connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute("UPDATE tenants SET name = 'planted' WHERE tenant_id = %s", (planted,))
    conn.commit()
    conn.close()

    loads = [GuardLoad(guard_env(z), z, i, old=seeded[z][10:400]) for i, z in enumerate(ZONES)]
    for load in loads:
        load.__enter__()
    try:
        wait_until(lambda: all(ld.transactions >= 20 for ld in loads), 30, "every zone writes")
        outcomes, writes = [], []
        for n in range(2):
            before, started = sum(ld.transactions for ld in loads), time.monotonic()
            run_id = f"chk-load-{n}"
            ctx = context(meta, zones, run_id, tables=("tenants",), chunk_rows=200)
            steps.preflight(ctx)
            steps.record_start(ctx)
            result = consistency_check.run(spark, job_args(meta, zones, tmp_path, run_id, tables=["tenants"],
                                                           settle_timeout_s=60.0))  # fmt: skip
            outcomes.append((steps.finish(ctx, result), result))
            writes.append((sum(ld.transactions for ld in loads) - before) / (time.monotonic() - started))
    finally:
        for load in loads:
            load.__exit__(None, None, None)
    print(f"guarded writes during the checks: {', '.join(f'{w:.0f}/s' for w in writes)}")
    for run, result in outcomes:
        found = [(d["key"], d["right"], d["zones"]) for d in CheckStore(meta).diffs(run.run_id)]
        assert found == [(f"[{planted}]", "a", {"b": ["name"]})], found
        # S002-10: the event counts of every direction, none differing
        counts = run.summary["_reconcile"]
        assert set(counts) == {f"{s}->{t}" for s in ZONES for t in ZONES if s != t}
        assert not any(c["mismatch"] for c in counts.values()), counts
        statuses = result["tables"]["tenants"]["outcome"]["by_status"]
        assert statuses.get("mismatch") == 1 and result["tables"]["tenants"]["outcome"]["complete"], statuses
    # the writes made chunks differ at first, and they settled (else nothing under load was tested)
    assert sum(r["tables"]["tenants"]["outcome"]["rechecked"] for _, r in outcomes) > 2
    # and once the writes stopped and replication caught up, the counts agree partition by partition
    ctx = context(meta, zones, "chk-load-0", tables=("tenants",))
    wait_until(lambda: all(c["ok"] > 0 and not c["mismatch"] for c in steps.reconcile_counts(ctx).values()), 60,
               "every direction reconciled")  # fmt: skip
