"""zone_inventory end to end with dag.test(): Airflow connections -> spark-submit -> report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dags, pytest.mark.integration, pytest.mark.slow]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "zone_inventory.py"


@pytest.fixture
def orders(zones):
    expected = {"a": 25, "b": 40}
    for name, count in expected.items():
        conn = zones[name].connect("zonesync_app")
        with conn.cursor() as cur:
            cur.execute("DELETE FROM orders")
            cur.executemany(
                "INSERT INTO orders (order_id, tenant_id, amount) VALUES (%s, 1, 2.50)",
                [(i,) for i in range(100, 100 + count)],
            )
    return expected


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE)).dags["zone_inventory"]


def test_zone_inventory_runs_a_spark_job(airflow_db, orders, dag):
    from zonesync_airflow.operators.spark import output_dir

    run = dag.test(run_conf={"zones": ["a", "b"], "partitions": 2})
    assert run.state == "success"
    out = output_dir() / "zone_inventory" / f"{run.run_id.replace(':', '_').replace('+', '_')}.inventory.json"
    result = json.loads(out.read_text())
    assert {z: r["rows"] for z, r in result.items()} == orders
    assert result["a"]["key_min"] == 100 and result["b"]["key_max"] == 139


def test_bad_params_are_refused_before_anything_runs(airflow_db, dag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="partitions"):
        dag.test(run_conf={"partitions": 0})
    with pytest.raises(ParamValidationError, match="zones"):
        dag.test(run_conf={"zones": ["A;drop"]})
