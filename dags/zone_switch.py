"""zone_switch: move a set of ZSIDs from one zone to another while writes go on.

Seed 000 "Zone 切换": BLOCK -> RESHARDING -> wait for sync -> ACTIVE, each push
acked by every guard of both zones. The steps live in zonesync.switch.steps;
this file only wires them:

    preflight >> record_state >> [block, reshard, wait_sync, activate]
    activate >> verify_start >> verify_check (Spark) >> verify
    [block, reshard, wait_sync] >> rollback   (one_failed)

The protocol order inside the write-blocked window, block -> reshard ->
wait_sync -> activate, is kept by gates (zonesync.switch.gate), not by task
dependencies: the four tasks start together, and each waits for the stamp its
predecessor writes in meta when it is done (BLOCK acked, T, synced). A task
start costs a second or more on a busy machine; as dependencies, three of them
would fall inside the window. A gated task whose predecessor has not started
reschedules itself instead of holding a worker slot; one whose predecessor
ended without its stamp is skipped (activate fails, so the run ends failed).
wait_sync takes the sync position P itself (zonesync.switch.steps.sync_position).

rollback runs only when a step before the point of no return failed for good
(a refusal or an ack timeout fails at once; a crash is retried first); it
restores the recorded owner and the run still ends failed: activate's gate
closes and fails it, so the verify tasks are upstream_failed. Once past its gate,
activate retries many times and is never rolled back. verify is the consistency
check restricted to the moved ZSIDs (zonesync.switch.verify): its run started, its
Spark job (chunk checksums pushed down to both zones), its result judged. Trigger it
from the UI form, the REST API, or `zonesync switch --zsids 0-99 --from a --to b
--reason ...`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, TriggerRule

from zonesync_airflow.operators.spark import restricted_check
from zonesync_airflow.operators.switch import (
    ZoneSwitchActivateOperator,
    ZoneSwitchBlockOperator,
    ZoneSwitchPreflightOperator,
    ZoneSwitchRecordStateOperator,
    ZoneSwitchReshardOperator,
    ZoneSwitchRollbackOperator,
    ZoneSwitchVerifyOperator,
    ZoneSwitchVerifyStartOperator,
)
from zonesync_airflow.sensors.switch import ZoneSyncedSensor

ZONE = {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,15}$"}

with DAG(
    dag_id="zone_switch",
    description="Move ZSIDs from one zone to another: BLOCK, RESHARDING, wait for sync, ACTIVE; rollback on failure.",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["zonesync", "switch", "protocol"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    params={
        "zsids": Param(
            "0-99",
            type="string",
            pattern=r"^\s*[0-9]+(\s*-\s*[0-9]+)?(\s*,\s*[0-9]+(\s*-\s*[0-9]+)?)*\s*$",
            description="ZSIDs to move: ranges and single ids, e.g. '0-99,200'.",
        ),
        "from_zone": Param("a", **ZONE, description="The zone that owns the ZSIDs now."),
        "to_zone": Param("b", **ZONE, description="The zone that will own them."),
        "reason": Param("", type="string", minLength=1, maxLength=500, description="Why (kept in the history)."),
        "ack_timeout_s": Param(
            10.0, type="number", minimum=0.1, maximum=600, description="How long each push waits for every guard's ack."
        ),
        "max_txn_ms": Param(
            500,
            type="integer",
            minimum=0,
            maximum=600000,
            description="Margin waited after the BLOCK acks before P is read: the longest transaction a writer "
            "outside the guard's commit recheck may still commit.",
        ),
        "lag_threshold_s": Param(
            5.0, type="number", minimum=0, maximum=3600, description="Preflight refuses when replication lags more."
        ),
        "sync_timeout_s": Param(
            120.0, type="number", minimum=1, maximum=86400, description="wait_sync gives up (and rolls back) after."
        ),
    },
) as dag:
    preflight = ZoneSwitchPreflightOperator(task_id="preflight")
    record_state = ZoneSwitchRecordStateOperator(task_id="record_state")
    # Queued in protocol order when worker slots are short: a gated task's predecessor goes first.
    window = {"weight_rule": "absolute"}
    block = ZoneSwitchBlockOperator(task_id="block", priority_weight=4, **window)
    reshard = ZoneSwitchReshardOperator(task_id="reshard", after="block", priority_weight=3, **window)
    wait_sync = ZoneSyncedSensor(task_id="wait_sync", after="reshard", priority_weight=2, **window)
    activate = ZoneSwitchActivateOperator(
        task_id="activate",
        after="wait_sync",
        priority_weight=1,
        **window,
        retries=30,
        retry_delay=timedelta(seconds=1),
        retry_exponential_backoff=2.0,
        max_retry_delay=timedelta(seconds=30),  # the ZSIDs are writable nowhere meanwhile
    )
    verify_start = ZoneSwitchVerifyStartOperator(task_id="verify_start")
    verify_check = restricted_check(
        "verify_check", "zonesync-switch-verify", extra_args=("--max-lag-s", "0"), retries=2
    )
    verify = ZoneSwitchVerifyOperator(task_id="verify")
    rollback = ZoneSwitchRollbackOperator(
        task_id="rollback",
        trigger_rule=TriggerRule.ONE_FAILED,
        retries=5,
        retry_delay=timedelta(seconds=2),
        priority_weight=5,  # before any window task of any run: the ZSIDs are blocked until it ends
        weight_rule="absolute",
    )

    preflight >> record_state >> [block, reshard, wait_sync, activate]
    activate >> verify_start >> verify_check >> verify
    [block, reshard, wait_sync] >> rollback
