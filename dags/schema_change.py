"""schema_change: one DDL statement into every zone, then the tables it held drained.

zonesync replicates rows, not DDL (docs/schema-changes.md). While the zones' definitions
differ, appliers hold the table wherever events of the other shape arrive (its events
parked, every other table going on). This DAG rolls the statement through and cures that:

    preflight >> apply >> verify >> resume >> report (all done)

preflight checks the statement (one ALTER TABLE / CREATE INDEX / DROP INDEX), the zones,
the lag, and learns the table's definition after it on an empty scratch copy; apply runs
it zone by zone in the request's order, skipping a zone that has it already; verify
requires the same definition everywhere; resume drains every hold of the table. report
always runs and says which zones have the change (a failed run leaves the others as they
are: DDL does not roll back; running it again goes on). Trigger it from the UI form, the
REST API, or `zonesync schema apply --sql ... --reason ...`. The steps: zonesync.schema.steps.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, TriggerRule

from zonesync_airflow.operators.schema_steps import SchemaChangeStepOperator

with DAG(
    dag_id="schema_change",
    description="One DDL statement into every zone in order, then the tables it held drained.",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["zonesync", "schema"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "sql": Param(
            "",
            type="string",
            minLength=1,
            maxLength=10000,
            description="One ALTER TABLE, CREATE INDEX or DROP INDEX statement on an application table.",
        ),
        "zones": Param(
            [],
            type="array",
            items={"type": "string", "pattern": "^[a-z][a-z0-9_]{0,15}$"},
            uniqueItems=True,
            description="Zones to change, in this order; empty: every zone, in id order.",
        ),
        "reason": Param("", type="string", minLength=1, maxLength=500, description="Why (kept in the task log)."),
        "max_lag_s": Param(
            5.0, type="number", minimum=0, maximum=3600, description="Refuse to start while replication lags more."
        ),
    },
) as dag:
    preflight = SchemaChangeStepOperator(task_id="preflight", step="preflight")
    apply = SchemaChangeStepOperator(task_id="apply", step="apply", execution_timeout=timedelta(hours=6))
    verify = SchemaChangeStepOperator(task_id="verify", step="verify")
    resume = SchemaChangeStepOperator(task_id="resume", step="resume")
    report = SchemaChangeStepOperator(task_id="report", step="report", trigger_rule=TriggerRule.ALL_DONE, retries=3)

    preflight >> apply >> verify >> resume >> report
