"""tag_backfill: tag the rows a zone held before their table's tag rule (Spark).

After `zonesync tags apply` registers a table, the zone's tagger tags its changes from
then on; this DAG's job (spark_jobs/tag_backfill.py, docs/tagging.md) tags the rows that
were already there, in key-range chunks, resumably: a retry of the task, or a new run
with the same `backfill_id`, goes on after the chunks done.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

from zonesync_airflow.operators.spark import ZoneSparkSubmitOperator

JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "tag_backfill.py")
NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"}

with DAG(
    dag_id="tag_backfill",
    description="Tag the rows a zone held before their table's tag rule (Spark, resumable).",
    schedule=None,
    catchup=False,
    tags=["zonesync", "spark", "tagging"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    params={
        "zone": Param(
            "a",
            type="string",
            pattern="^[a-z][a-z0-9_]{0,15}$",
            description="The zone whose tag store is filled (its connection zonesync_zone_<name>).",
        ),  # fmt: skip
        "tables": Param(
            [],
            type="array",
            items=NAME,
            uniqueItems=True,
            description="Tagged tables to backfill; empty: every one of the rules in force.",
        ),  # fmt: skip
        "backfill_id": Param(
            "",
            type="string",
            pattern="^[A-Za-z0-9_.:+-]{0,64}$",
            description="Names the backfill; the same name resumes it. Empty: this run's id.",
        ),  # fmt: skip
        "chunk_rows": Param(100000, type="integer", minimum=1000, maximum=10000000, description="Keys per chunk."),
        "wait_tagger_s": Param(
            300,
            type="integer",
            minimum=1,
            maximum=86400,
            description="How long to wait for the zone's tagger to tag by the rules in force.",
        ),  # fmt: skip
    },
) as dag:
    backfill = ZoneSparkSubmitOperator(
        task_id="backfill",
        application=JOB,
        zones="{{ params.zone }}",
        application_args=[
            "--run-id",
            "{{ params.backfill_id or run_id }}",
            "--table",
            "{{ params.tables | join(',') }}",
            "--chunk-rows",
            "{{ params.chunk_rows }}",
            "--wait-tagger-s",
            "{{ params.wait_tagger_s }}",
            "--airflow-run-id",
            "{{ run_id }}",
        ],  # fmt: skip
        meta_conn_id="zonesync_meta",
        name="zonesync-tag-backfill",
        execution_timeout=timedelta(hours=12),
    )

    @task
    def report(output_path: str) -> dict:
        import json

        result = json.loads(Path(output_path).read_text())
        for table, row in result["tables"].items():
            print(f"zone {result['zone']}, {table}: {row['rows_tagged']} rows tagged in {row['chunks']} chunks "
                  f"({row['resumed_after']} done before)")  # fmt: skip
        return result

    report(backfill.output)
