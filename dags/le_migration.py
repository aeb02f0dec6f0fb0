"""le_migration: move a tenant's locating entities to another zone (seed 004 §5).

The steps live in zonesync.migrate.steps (docs/migration.md tells the protocol); this
file only wires them:

    preflight >> stop_first >> admit >> stock (Spark) >> verify_start >> verify_check (Spark)
        >> verify >> gate >> cutover >> release >> report
    [preflight, stop_first, admit, stock, verify_start, verify_check, verify, gate, cutover]
        >> rollback (one_failed)

gate (S004-15) holds the stop-write until the target keeps up with the source (max_lag_s)
and the clock is inside stop_window_utc, deferring to the triggerer while it waits; after
gate_timeout_s the run rolls back with nothing stopped.

Modes: plan1 (default) copies and verifies while the tenant writes, then stops it for the
cutover only; plan2 stops it first (stop_first; refused when its resident rows are more
than plan2_max_rows), copies, skips verify (the final check compares every row with writes
stopped) and cuts over: simpler, and the whole copy is inside its stop-write window.

Resident tables (rows only in the tenant's unit): admit makes the target apply the
tenant's resident rows from the source's stream, stock copies them (the full copy's Spark
job, by the tenant's entity predicate; skipped when nothing resident moves), release
purges the source's copy after the lift (unless keep_source_copy). KV keys (each zone's
own) move in the same tasks: copied in admit, compared in verify, those changed since caught
up and compared in the cutover's final check, deleted at the source by release, removed from
the target by rollback.

verify compares the tenant's rows row by row while it is still written (the check's Spark
job, lag-aware); a difference ends the run before anything is stopped. cutover is the
stop-write window in one task (stop_write, sync_position, synced, final_check, flip,
lift; each step recorded and idempotent), so no task start falls inside it; it waits for
sync in the worker, then defers to the triggerer. Before the flip, a step that fails for
good sends the run to rollback: the tenant writable again in its zone, the run failed
with the step's reason. The flip is the point of no return: cutover retries from there
until lifted, and rollback, if it runs, rolls forward (lifts in the target). report, the
last task, logs the run's outcome (upstream_failed when the cutover did not succeed, so the
run ends failed even when the rollback did its job). The run's
state is in meta (`zonesync migrations`, `GET /zonesync/api/v1/migrations/{run_id}`).
Trigger it from the UI form, the REST API, `POST /zonesync/api/v1/tenants/{tenant}/
migrations` or `zonesync migrate --tenant 7 --to b --reason ...`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, TriggerRule

from zonesync_airflow.operators.migration import (
    ZoneMigrationCutoverOperator,
    ZoneMigrationGateOperator,
    ZoneMigrationStepOperator,
)
from zonesync_airflow.operators.spark import restricted_check, stock_copy

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
        "les": Param(
            [],
            type="array",
            items={"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,31}:[ -~]{1,128}$"},
            maxItems=1000,
            description="Only these of the tenant's locating entities, TYPE:ID (e.g. chat:70), moved together; "
            "empty: all of them. A tenant too big to stop at once moves in several runs, each atomic.",
        ),
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
        "max_txn_ms": Param(
            500,
            type="integer",
            minimum=0,
            maximum=600000,
            description="Margin waited after the stop-write's acks before P is read: the longest transaction a "
            "writer outside the guard's commit recheck may still commit.",
        ),
        "sync_timeout_s": Param(
            120.0,
            type="number",
            minimum=1,
            maximum=86400,
            description="How long the target may take to apply the source up to P before the migration rolls back.",
        ),  # fmt: skip
        "max_lag_s": Param(
            5.0,
            type="number",
            minimum=0,
            maximum=3600,
            description="The stop-write waits until the target applies the source's stream at most this far behind.",
        ),
        "stop_window_utc": Param(
            "",
            type="string",
            pattern=r"^(([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9])?$",
            description="Stop writes only inside this UTC window, HH:MM-HH:MM (e.g. 02:00-04:30); empty: any time.",
        ),
        "gate_timeout_s": Param(
            3600.0,
            type="number",
            minimum=1,
            maximum=604800,
            description="How long the stop-write gate may stay closed before the migration rolls back.",
        ),
        "plan2_max_rows": Param(
            100_000,
            type="integer",
            minimum=0,
            maximum=100_000_000,
            description="plan2 is refused when the tenant's resident rows at the source are more than this.",
        ),
        "keep_source_copy": Param(
            False,
            type="boolean",
            description="Keep the source's copy of the tenant's resident rows after the move (default: purged).",
        ),
        "stock_chunk_rows": Param(
            50_000,
            type="integer",
            minimum=100,
            maximum=10_000_000,
            description="Rows per chunk of the stock copy (a killed copy redoes at most the chunks in flight).",
        ),
    },
) as dag:
    preflight = ZoneMigrationStepOperator(task_id="preflight", step="preflight")
    stop_first = ZoneMigrationStepOperator(task_id="stop_first", step="stop_first")
    admit = ZoneMigrationStepOperator(task_id="admit", step="admit")
    stock = stock_copy("stock", "zonesync-migration-stock")
    verify_start = ZoneMigrationStepOperator(
        task_id="verify_start",
        step="verify_start",
        trigger_rule=TriggerRule.NONE_FAILED,  # stock skipped: none
    )
    verify_check = restricted_check("verify_check", "zonesync-migration-verify")
    verify = ZoneMigrationStepOperator(
        task_id="verify",
        step="verify",
        trigger_rule=TriggerRule.NONE_FAILED,  # verify_check skipped: plan2
    )
    gate = ZoneMigrationGateOperator(task_id="gate")
    cutover = ZoneMigrationCutoverOperator(
        task_id="cutover",
        retries=30,  # a refusal before the flip fails at once; a crash retries, past the flip until lifted
        retry_delay=timedelta(seconds=1),
        retry_exponential_backoff=2.0,
        max_retry_delay=timedelta(seconds=30),
        priority_weight=4,
        weight_rule="absolute",
    )
    rollback = ZoneMigrationStepOperator(
        task_id="rollback",
        step="rollback",
        trigger_rule=TriggerRule.ONE_FAILED,
        retries=5,
        retry_delay=timedelta(seconds=2),
        priority_weight=5,  # the tenant may be stopped until it ends
        weight_rule="absolute",
    )

    release = ZoneMigrationStepOperator(task_id="release", step="release")
    report = ZoneMigrationStepOperator(task_id="report", step="report")

    preflight >> stop_first >> admit >> stock >> verify_start >> verify_check >> verify >> gate >> cutover
    cutover >> release >> report
    [preflight, stop_first, admit, stock, verify_start, verify_check, verify, gate, cutover] >> rollback
