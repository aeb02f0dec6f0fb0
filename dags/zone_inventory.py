"""zone_inventory: count, key range and checksum of one table in every zone (Spark).

The demo's main job and the smoke test of the whole stack: Airflow resolves the
zone connections, spark-submit reads each zone in parallel key ranges over JDBC,
and a report task publishes the per-zone result as XCom and in the task log.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

from zonesync_airflow.operators.spark import ZoneSparkSubmitOperator

JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "zone_inventory.py")

with DAG(
    dag_id="zone_inventory",
    description="Row count, key range and checksum of one table in every zone, read by Spark.",
    schedule=None,
    catchup=False,
    tags=["zonesync", "spark", "check"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    params={
        "zones": Param(
            ["a", "b", "c"],
            type="array",
            items={"type": "string", "pattern": "^[a-z][a-z0-9_]{0,15}$"},
            minItems=1,
            uniqueItems=True,
            description="Zones to read; each needs an Airflow connection zonesync_zone_<name>.",
        ),
        "table": Param("orders", type="string", pattern="^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="Table name."),
        "key": Param(
            "order_id", type="string", pattern="^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="Integer key to split on."
        ),
        "partitions": Param(4, type="integer", minimum=1, maximum=256, description="Parallel key ranges per zone."),
    },
) as dag:
    inventory = ZoneSparkSubmitOperator(
        task_id="inventory",
        application=JOB,
        zones="{{ params.zones | join(',') }}",
        application_args=[
            "--table",
            "{{ params.table }}",
            "--key",
            "{{ params.key }}",
            "--partitions",
            "{{ params.partitions }}",
        ],
        name="zonesync-zone-inventory",
        execution_timeout=timedelta(minutes=10),
    )

    @task
    def report(output_path: str) -> dict:
        import json

        result = json.loads(Path(output_path).read_text())
        for zone, row in result.items():
            print(
                f"zone {zone}: {row['rows']} rows, keys {row['key_min']}..{row['key_max']}, checksum {row['checksum']}"
            )
        return result

    report(inventory.output)
