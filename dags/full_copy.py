"""full_copy: copy tables from a healthy zone into another while every zone writes.

Seed 000 (在线全量同步: Row Copy + Incremental Copy, the incremental authoritative),
001 (replica learn) and 002 (online standby). The steps live in zonesync.copy.steps
and the row copy in spark_jobs/full_copy.py; this file only wires them:

    preflight >> record_start >> start_incremental >> row_copy >> catch_up >> prune >> verify >> join
    [record_start, start_incremental, row_copy, catch_up, prune, verify] >> rollback  (one_failed)

rollback runs only when a step before join failed for good: the target's appliers go
back where they were, its tables leave copy mode, staging is dropped, and the run
ends failed with its reason. Trigger it from the UI form, the REST API, or
`zonesync copy --from a --to b --reason ...`; docs/copy.md tells the whole protocol.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, TriggerRule

from zonesync_airflow.operators.copy_steps import ZoneCopyCaughtUpSensor, ZoneCopyStepOperator
from zonesync_airflow.operators.spark import ZoneSparkSubmitOperator

JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "full_copy.py")
ZONE = {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,15}$"}

with DAG(
    dag_id="full_copy",
    description="Online full copy of tables from one zone into another; every zone keeps writing.",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["zonesync", "copy", "spark"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "from_zone": Param("a", **ZONE, description="The healthy zone the rows are read from."),
        "to_zone": Param("b", **ZONE, description="The zone rebuilt, added, or repaired."),
        "tables": Param(
            [],
            type="array",
            items={"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"},
            uniqueItems=True,
            description="Tables to copy; empty: every table the rule set replicates.",
        ),
        "mode": Param("rebuild", type="string", enum=["rebuild", "add-zone", "repair"], description="Why the copy."),
        "reason": Param("", type="string", minLength=1, maxLength=500, description="Why (kept in the history)."),
        "chunk_rows": Param(50000, type="integer", minimum=100, maximum=10000000, description="Rows per chunk."),
        "parallel": Param(
            16,
            type="integer",
            minimum=1,
            maximum=256,
            description="Chunks per wave: one Spark job (its executors land as many at once as they have cores); "
            "the lag throttle looks between waves.",
        ),
        "max_lag_s": Param(
            5.0,
            type="number",
            minimum=0,
            maximum=3600,
            description="The row copy waits while another zone's replication lags more (0: never waits).",
        ),
        "catch_up_timeout_s": Param(
            3600, type="integer", minimum=10, maximum=604800, description="catch_up gives up (and rolls back) after."
        ),
    },
) as dag:
    preflight = ZoneCopyStepOperator(task_id="preflight", step="preflight")
    record_start = ZoneCopyStepOperator(task_id="record_start", step="record_start")
    start_incremental = ZoneCopyStepOperator(task_id="start_incremental", step="start_incremental")
    row_copy = ZoneSparkSubmitOperator(
        task_id="row_copy",
        application=JOB,
        zones="{{ params.from_zone }},{{ params.to_zone }}",
        application_args=[
            "--run-id",
            "{{ run_id }}",
            "--source",
            "{{ params.from_zone }}",
            "--target",
            "{{ params.to_zone }}",
            "--table",
            "{{ ti.xcom_pull(task_ids='preflight') }}",
            "--chunk-rows",
            "{{ params.chunk_rows }}",
            "--parallel",
            "{{ params.parallel }}",
            "--max-lag-s",
            "{{ params.max_lag_s }}",
        ],
        meta_conn_id="zonesync_meta",
        name="zonesync-full-copy",
        driver_memory="512m",  # a wave's rows at a time: peak RSS flat from 1M to 3M rows (make bench copy)
        execution_timeout=timedelta(hours=12),
    )
    catch_up = ZoneCopyCaughtUpSensor(task_id="catch_up")
    prune = ZoneCopyStepOperator(task_id="prune", step="prune")
    verify = ZoneCopyStepOperator(task_id="verify", step="verify")
    join = ZoneCopyStepOperator(task_id="join", step="join", retries=5)
    rollback = ZoneCopyStepOperator(task_id="rollback", step="rollback", trigger_rule=TriggerRule.ONE_FAILED, retries=5)

    preflight >> record_start >> start_incremental >> row_copy >> catch_up >> prune >> verify >> join
    [record_start, start_incremental, row_copy, catch_up, prune, verify] >> rollback
