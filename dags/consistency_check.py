"""consistency_check: every zone against every other, chunk checksums then row diffs.

The design card's "scheduled consistency checks". The steps live in zonesync.check.steps
and the comparison in spark_jobs/consistency_check.py; this file only wires them:

    preflight >> record_start >> check >> repair >> finish
    [preflight, record_start, check, repair] >> fail  (one_failed)

`repair` (param on) sets each differing row to its owner's row where a zone has it
wrong (zonesync.check.repair); off, it does nothing. `finish` fails (the run shows
red) when rows differ; their report is `zonesync check report RUN_ID`. Runs on
ZONESYNC_CHECK_SCHEDULE (default hourly; a cron expression, a preset such as @daily,
or "none"), and from the UI form, the REST API or `zonesync check`; docs/consistency-check.md tells the whole protocol.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, TriggerRule

from zonesync import jvm
from zonesync_airflow.operators.check_steps import ZoneCheckStepOperator
from zonesync_airflow.operators.spark import ZoneSparkSubmitOperator

JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "consistency_check.py")
NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"}
SCHEDULE = os.environ.get("ZONESYNC_CHECK_SCHEDULE", "@hourly")

with DAG(
    dag_id="consistency_check",
    description="Every zone's rows against every other's: chunk checksums, then the rows of chunks that differ.",
    schedule=None if SCHEDULE.lower() == "none" else SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["zonesync", "check", "spark"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "zones": Param(
            [],
            type="array",
            items={"type": "string", "pattern": "^[a-z][a-z0-9_]{0,15}$"},
            uniqueItems=True,
            description="Zones to compare; empty: every zone.",
        ),  # fmt: skip
        "tables": Param(
            [],
            type="array",
            items=NAME,
            uniqueItems=True,
            description="Tables to check; empty: every table the rule set replicates.",
        ),  # fmt: skip
        "chunk_rows": Param(100000, type="integer", minimum=100, maximum=10000000, description="Rows per chunk."),
        "rows": Param(True, type="boolean", description="Read and diff the rows of chunks that differ."),
        "repair": Param(
            False, type="boolean", description="Set each differing row to its owner's row where a zone has it wrong."
        ),  # fmt: skip
        "reason": Param("scheduled", type="string", minLength=1, maxLength=500, description="Why (history)."),
        "parallel": Param(
            16, type="integer", minimum=1, maximum=256, description="Chunks per wave, each asked of every zone at once."
        ),  # fmt: skip
        "max_lag_s": Param(
            5.0,
            type="number",
            minimum=0,
            maximum=3600,
            description="Wait between waves while a zone lags more (0: never).",
        ),  # fmt: skip
    },
) as dag:
    preflight = ZoneCheckStepOperator(task_id="preflight", step="preflight")
    record_start = ZoneCheckStepOperator(task_id="record_start", step="record_start")
    check = ZoneSparkSubmitOperator(
        task_id="check",
        application=JOB,
        zones="{{ ti.xcom_pull(task_ids='preflight')['zones'] }}",
        application_args=[
            "--run-id",
            "{{ run_id }}",
            "--table",
            "{{ ti.xcom_pull(task_ids='preflight')['tables'] }}",
            "--parallel",
            "{{ params.parallel }}",
            "--max-lag-s",
            "{{ params.max_lag_s }}",
            "{{ '--rows' if params.rows else '--no-rows' }}",
        ],  # fmt: skip
        meta_conn_id="zonesync_meta",
        name="zonesync-consistency-check",
        driver_memory="512m",
        conf=jvm.driver_conf(dispatch_only=True),  # the driver hands out queries and waits
        execution_timeout=timedelta(hours=12),
    )
    repair = ZoneCheckStepOperator(task_id="repair", step="repair")
    finish = ZoneCheckStepOperator(task_id="finish", step="finish")  # differences fail it at once (no retry)
    fail = ZoneCheckStepOperator(task_id="fail", step="fail", trigger_rule=TriggerRule.ONE_FAILED, retries=5)

    preflight >> record_start >> check >> repair >> finish
    [preflight, record_start, check, repair] >> fail
