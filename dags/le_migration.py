"""le_migration: move a tenant's locating entities to another zone (seed 004 §5).

The steps live in zonesync.migrate.steps (docs/migration.md tells the protocol); this
file only wires them:

    preflight >> stop_write >> synced >> verify_start >> verify_check (Spark) >> verify
    verify >> flip >> lift
    [preflight, stop_write, synced, verify_start, verify_check, verify] >> rollback  (one_failed)

Before flip, a step that fails for good sends the run to rollback: the tenant writable
again in its zone, the run failed with the step's reason. flip is the point of no
return: flip and lift retry until done (the tenant is writable nowhere meanwhile), and a
rollback that comes later refuses. The run's state is in meta (`zonesync migrations`,
`GET /zonesync/api/v1/tenants/{tenant}/migrations`). Trigger it from the UI form, the REST
API, `POST /zonesync/api/v1/tenants/{tenant}/migrations` or `zonesync migrate --tenant 7
--to b --reason ...`.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, TriggerRule

from zonesync import jvm
from zonesync_airflow.operators.migration import ZoneMigrationStepOperator
from zonesync_airflow.operators.spark import ZoneSparkSubmitOperator
from zonesync_airflow.sensors.migration import MigrationSyncedSensor

CHECK_JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "consistency_check.py")
STARTED = "ti.xcom_pull(task_ids='verify_start')"
PAST_FLIP = {"retries": 30, "retry_delay": timedelta(seconds=1), "retry_exponential_backoff": 2.0,
             "max_retry_delay": timedelta(seconds=30)}  # fmt: skip

with DAG(
    dag_id="le_migration",
    description="Move a tenant's locating entities to another zone: stop-write, sync, verify, flip, lift; rollback.",
    schedule=None,
    catchup=False,
    max_active_runs=8,
    tags=["zonesync", "migration", "protocol"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    params={
        "tenant": Param(
            "7",
            type="string",
            minLength=1,
            maxLength=128,
            pattern=r"^[ -~]+$",
            description="The tenant (biz entity `tenant`) to move, with every locating entity it owns.",
        ),
        "to_zone": Param("b", type="string", pattern="^[a-z][a-z0-9_]{0,15}$", description="The zone it moves to."),
        "mode": Param(
            "plan1",
            type="string",
            enum=["plan1", "plan2"],
            description="plan1: sync while writes go on, then a short stop-write; plan2: stop-write first.",
        ),
        "reason": Param("", type="string", minLength=1, maxLength=500, description="Why (kept in the history)."),
        "ack_timeout_s": Param(
            10.0, type="number", minimum=0.1, maximum=600, description="How long each push waits for every guard's ack."
        ),  # fmt: skip
        "sync_timeout_s": Param(
            120.0,
            type="number",
            minimum=1,
            maximum=86400,
            description="How long the target may take to apply the source up to P before the migration rolls back.",
        ),  # fmt: skip
    },
) as dag:
    preflight = ZoneMigrationStepOperator(task_id="preflight", step="preflight")
    stop_write = ZoneMigrationStepOperator(task_id="stop_write", step="stop_write", priority_weight=4,
                                           weight_rule="absolute")  # fmt: skip
    synced = MigrationSyncedSensor(task_id="synced", priority_weight=4, weight_rule="absolute")
    verify_start = ZoneMigrationStepOperator(task_id="verify_start", step="verify_start")
    verify_check = ZoneSparkSubmitOperator(
        task_id="verify_check",
        application=CHECK_JOB,
        zones=f"{{{{ {STARTED}['zones'] }}}}",
        application_args=[
            "--run-id",
            f"{{{{ {STARTED}['check_run_id'] }}}}",
            "--table",
            f"{{{{ {STARTED}['tables'] }}}}",
            "--max-lag-s",
            "0",
        ],
        meta_conn_id="zonesync_meta",
        name="zonesync-migration-verify",
        driver_memory="512m",
        conf=jvm.driver_conf(dispatch_only=True),
    )
    verify = ZoneMigrationStepOperator(task_id="verify", step="verify")
    flip = ZoneMigrationStepOperator(task_id="flip", step="flip", **PAST_FLIP)
    lift = ZoneMigrationStepOperator(task_id="lift", step="lift", **PAST_FLIP)
    rollback = ZoneMigrationStepOperator(
        task_id="rollback",
        step="rollback",
        trigger_rule=TriggerRule.ONE_FAILED,
        retries=5,
        retry_delay=timedelta(seconds=2),
        priority_weight=5,  # the tenant is stopped until it ends
        weight_rule="absolute",
    )

    preflight >> stop_write >> synced >> verify_start >> verify_check >> verify >> flip >> lift
    [preflight, stop_write, synced, verify_start, verify_check, verify] >> rollback
