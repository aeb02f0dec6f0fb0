"""tag_backfill end to end with dag.test(): Params -> spark-submit of the backfill job with
the zone's and meta's connections -> the zone's tag store holds its older rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from zonesync.meta.store import MetaStore
from zonesync.tagging.rules import parse
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
    c = zones["c"]
    version = MetaStore(meta).publish_tags(parse(RULES), "test: the backfill DAG")
    with c.connect("zonesync_app").cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DELETE FROM orders")
        cur.executemany("INSERT INTO orders (order_id, tenant_id, amount, _zs_version) VALUES (%s, %s, 1, 7)",
                        [(i, i % 3) for i in range(1, 301)])  # fmt: skip
        cur.execute("DELETE FROM zonesync.tag_segments")
        cur.execute("DELETE FROM zonesync.tag_backfill")
        # zone c's tagger, which these tests do not run, would have written this with its
        # first batch under the new rules: the job waits for it
        cur.execute("UPDATE zonesync.tag_writer SET rules_version = %s WHERE id = 1", (version,))
    yield c
    with c.connect("zonesync_app").cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DELETE FROM orders")
        cur.execute("DELETE FROM zonesync.tag_segments")


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
