"""tag_backfill end to end with dag.test(): Params -> spark-submit of the backfill job with
the zone's and meta's connections -> the zone's tag store holds its older rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.taggers import clear_orders, older_orders
from zonesync.tagging.tag_store import TagStore

pytestmark = [pytest.mark.dags, pytest.mark.integration, pytest.mark.slow]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "tag_backfill.py"
RULES = {"mysql": [{"repo": "zonesync_app", "table": "orders", "index_keys": ["order_id"],
                    "entity": {"type": "tenant", "field": "tenant_id"}}]}  # fmt: skip


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE)).dags["tag_backfill"]


@pytest.fixture
def zone_c(zones, meta):
    older_orders(zones["c"], meta, RULES, 300, 3, "test: the backfill DAG")
    yield zones["c"]
    clear_orders(zones["c"])


def test_the_dag_backfills_a_zones_older_rows(airflow_db, zone_c, dag):
    run = dag.test(run_conf={"zone": "c", "backfill_id": "dag-test", "chunk_rows": 1000})
    assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
    store = TagStore(lambda: zone_c.connect("zonesync_app"), "zonesync_app")
    assert store.rows_of("tenant", "1")["orders"] == sorted(f"[{i}]" for i in range(1, 301) if i % 3 == 1)
    assert sum(len(store.rows_of("tenant", str(t)).get("orders", [])) for t in range(3)) == 300


def test_bad_params_are_refused_before_anything_runs(airflow_db, dag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="chunk_rows"):
        dag.test(run_conf={"chunk_rows": 10})
    with pytest.raises(ParamValidationError, match="zone"):
        dag.test(run_conf={"zone": "B;drop"})
    with pytest.raises(ParamValidationError, match="tables"):
        dag.test(run_conf={"tables": ["a b"]})
