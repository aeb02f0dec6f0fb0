"""consistency_check through Airflow's dag.test(): real zones with replication running,
spark-submit. The comparison's cases are covered in tests/integration/check/; here: the
wiring. Converged zones pass; a row changed behind replication's back fails the run at
`finish` with the row in the report; with repair on, the row is set to its owner's and
the owner's next change of it lands everywhere; bad params are refused before any task
runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.copy.test_online_copy import own_keys, seed
from tests.support.replication import behind_replication, row_locks, wait_converged
from zonesync.check.store import CheckStore

pytestmark = [pytest.mark.dags, pytest.mark.integration, pytest.mark.slow]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "consistency_check.py"
CONF = {"tables": ["tenants"], "chunk_rows": 200, "parallel": 4, "reason": "dag test"}


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE)).dags["consistency_check"]


@pytest.fixture
def ready(airflow_db, cluster, meta, monkeypatch):
    monkeypatch.setenv("ZONESYNC_TOPIC_PREFIX", f"{cluster.prefix}.")
    monkeypatch.setenv("ZONESYNC_KAFKA_PARTITIONS", str(cluster.partitions))
    yield cluster
    for t in ("check_diffs", "check_chunks", "checks"):
        meta.run(f"DELETE FROM {t}")


def _states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_converged_zones_pass_and_a_changed_row_fails_the_run(ready, zones, meta, dag):
    seed(zones, "a", own_keys("a", 1000))  # a writes only its own rows: its neighbours check
    wait_converged(zones, ("tenants",), timeout=60)
    run = dag.test(run_conf=CONF)
    assert run.state == "success", _states(run)
    check = CheckStore(meta).require(run.run_id)
    assert check.status == "succeeded" and check.zones == ("a", "b", "c") and check.summary["tenants"]["rows"] == {
        "a": 1000, "b": 1000, "c": 1000}  # fmt: skip

    behind_replication(zones["b"], "UPDATE tenants SET name = 'changed behind replication' WHERE tenant_id = 7")
    run = dag.test(run_conf=CONF)
    states = _states(run)
    assert run.state == "failed" and states["finish"] == "failed" and states["fail"] == "skipped", states
    check = CheckStore(meta).require(run.run_id)
    assert check.status == "differences" and "1 rows differ" in check.detail
    assert [(d["key"], d["right"], d["zones"]) for d in CheckStore(meta).diffs(run.run_id)] == [
        ("[7]", "a", {"b": ["name"]})
    ]

    # repair on: b gets a's row; the run is still red (the zones differed when checked)
    run = dag.test(run_conf={**CONF, "repair": True})
    states = _states(run)
    assert states["repair"] == "success" and states["finish"] == "failed", states
    check = CheckStore(meta).require(run.run_id)
    assert "1 of them repaired" in check.detail
    assert [(d["key"], d["repair"]) for d in CheckStore(meta).diffs(run.run_id)] == [("[7]", "updated")]
    # the owner's next change of the row meets its own old image in b: applied, no lock
    conn = zones["a"].connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("UPDATE tenants SET name = 'after the repair', _zs_version = _zs_version + 1 WHERE tenant_id = 7")
    conn.commit()
    conn.close()
    wait_converged(zones, ("tenants",), timeout=60)
    assert row_locks(zones["b"]) == 0
    run = dag.test(run_conf=CONF)
    assert run.state == "success", _states(run)


def test_bad_params_are_refused_before_anything_runs(airflow_db, dag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="chunk_rows"):
        dag.test(run_conf={**CONF, "chunk_rows": 1})
    with pytest.raises(ParamValidationError, match="zones"):
        dag.test(run_conf={**CONF, "zones": ["A"]})
    with pytest.raises(ParamValidationError, match="rows"):
        dag.test(run_conf={**CONF, "rows": "yes"})
