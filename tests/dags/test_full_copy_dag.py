"""full_copy through Airflow's dag.test(): real zones, replication threads, spark-submit.

The protocol's cases are covered step by step in tests/integration/copy/; here: the
wiring. A copy into a wiped zone b runs every task to join and leaves b equal to a;
a copy refused by preflight changes nothing and its rollback has nothing to undo; bad
params are refused before any task runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.copy.test_online_copy import own_keys, seed, wipe
from tests.support.replication import behind_replication, checksum, wait_converged
from zonesync.copy.store import CopyStore

pytestmark = [pytest.mark.dags, pytest.mark.integration, pytest.mark.slow]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "full_copy.py"
CONF = {"from_zone": "a", "to_zone": "b", "reason": "dag test", "chunk_rows": 200, "parallel": 2}


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE)).dags["full_copy"]


@pytest.fixture
def ready(airflow_db, cluster, meta, monkeypatch):
    """The operators find the cluster's private topics and partition count."""
    monkeypatch.setenv("ZONESYNC_TOPIC_PREFIX", f"{cluster.prefix}.")
    monkeypatch.setenv("ZONESYNC_KAFKA_PARTITIONS", str(cluster.partitions))
    yield cluster
    meta.run("DELETE FROM copies")


def _states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_a_copy_runs_to_join(ready, zones, meta, dag):
    seed(zones, "a", own_keys("a", 1000))  # a writes only its own rows: its neighbours check
    wait_converged(zones, ("tenants",), timeout=60)
    wipe(zones["b"])
    run = dag.test(run_conf={**CONF, "tables": ["tenants"]})
    states = _states(run)
    assert run.state == "success", states
    assert states["rollback"] == "skipped" and states["join"] == "success"
    copy = CopyStore(meta).require(run.run_id)
    assert copy.status == "succeeded" and copy.tables == ("tenants",) and copy.positions()
    assert checksum(zones["b"]) == checksum(zones["a"])


def test_a_refused_copy_changes_nothing(ready, zones, meta, dag):
    before = checksum(zones["b"])
    run = dag.test(run_conf={**CONF, "tables": ["no_such_table"]})
    states = _states(run)
    assert run.state == "failed" and states["preflight"] == "failed", states
    assert states["row_copy"] == "upstream_failed" and states["rollback"] == "success", states
    assert CopyStore(meta).get(run.run_id) is None and checksum(zones["b"]) == before


def test_bad_params_are_refused_before_anything_runs(airflow_db, dag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="reason"):
        dag.test(run_conf={"from_zone": "a", "to_zone": "b", "reason": ""})
    with pytest.raises(ParamValidationError, match="mode"):
        dag.test(run_conf={**CONF, "mode": "fast"})
    with pytest.raises(ParamValidationError, match="chunk_rows"):
        dag.test(run_conf={**CONF, "chunk_rows": 1})


def test_a_copy_whose_verify_fails_rolls_back_and_the_run_fails(ready, zones, meta, dag):
    """b holds a row of its own that a lacks (never published): prune keeps it (b owns it),
    verify finds it, and the rollback task puts b's appliers back and ends the copy
    rolled back, naming the failed task."""
    seed(zones, "a", range(1, 301))
    wait_converged(zones, ("tenants",), timeout=60)
    behind_replication(zones["b"], "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES "
                                   "(500, 'only b', 2, 5)")  # fmt: skip
    run = dag.test(run_conf={**CONF, "tables": ["tenants"]})
    states = _states(run)
    assert run.state == "failed" and states["verify"] == "failed" and states["rollback"] == "success", states
    copy = CopyStore(meta).require(run.run_id)
    assert copy.status == "rolled_back" and "verify" in copy.detail, copy.detail
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.copy_tables")
        assert cur.fetchone()[0] == 0
