"""Operators of the zone switch: one per protocol step (zonesync.switch.steps).

Each operator resolves the meta store and zone connections when it runs, builds
the step's context from the DAG run's params, and runs the step, which records
its start, outcome and detail in meta (`zonesync switch status`). The steps are
idempotent, so Airflow's retries are safe; a rollback is its own task with a
trigger rule in the DAG, never a callback here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, AirflowSkipException

from zonesync.check.request import CheckRefused
from zonesync.meta.guards import AckTimeout, UnhealthyGuards
from zonesync.runtime.endpoints import Endpoint
from zonesync.switch.gate import GateClosed, GateNotReady, wait_gate
from zonesync.switch.plan import SwitchPlanError
from zonesync.switch.steps import RollbackStarted, SwitchContext, SwitchError, SwitchParams, run_step
from zonesync.switch.store import LeaseConflict
from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.hooks.zone import ZoneHook
from zonesync_airflow.operators.actor import run_actor


class ZoneConnections:
    """Zone name -> a new DB-API connection, the Airflow connection looked up once per zone.

    A lookup masks the connection's password through the task's supervisor, which
    can be blocked for seconds in a heartbeat to a stalled API server under load;
    steps inside the write-blocked window open zone connections (P, the sync
    checks), so a task resolves them before its gate (`resolve`), not there.
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.endpoints: dict[str, Endpoint] = {}

    def resolve(self, zones) -> None:
        for zone in zones:
            if zone not in self.endpoints:
                self.endpoints[zone] = ZoneHook.for_zone(zone, self.prefix).endpoint()

    def __call__(self, zone: str):
        self.resolve([zone])
        return self.endpoints[zone].connect()


def switch_context(context, meta_conn_id: str, zone_conn_prefix: str = "zonesync_zone_") -> SwitchContext:
    params = context["params"]
    dag_run = context["dag_run"]
    actor = run_actor(dag_run)  # the authenticated user, not a conf field (actor.py)
    return SwitchContext(
        meta=ZonesyncMetaHook(meta_conn_id).meta_config(),
        run_id=dag_run.run_id,
        params=SwitchParams(
            zsids=str(params["zsids"]),
            from_zone=params["from_zone"],
            to_zone=params["to_zone"],
            reason=params["reason"],
            ack_timeout_s=float(params["ack_timeout_s"]),
            max_txn_ms=int(params["max_txn_ms"]),
            lag_threshold_s=float(params["lag_threshold_s"]),
            sync_timeout_s=float(params["sync_timeout_s"]),
            actor=str(actor),
        ),
        zone_conn=ZoneConnections(zone_conn_prefix),
    )


def pass_gate(operator: BaseOperator, context, ctx: SwitchContext, step: str, after: str | None, closed=None) -> None:
    """Wait for the stamp of the task `after` (zonesync.switch.gate) before running `step`.

    The DAG starts the tasks inside the write-blocked window together, so none
    of them pays a task start inside it. Not started yet: reschedule in a
    second, freeing the worker slot. Ended without its stamp (failed, skipped,
    rolled back): `closed` (skip by default; rollback is the other branch).
    """
    if after is None:
        return
    ti, run_id = context["ti"], context["dag_run"].run_id

    def predecessor_state():
        return ti.get_task_states(dag_id=ti.dag_id, task_ids=[after], run_ids=[run_id]).get(run_id, {}).get(after)

    try:
        waited = wait_gate(ctx.store, ctx.run_id, step, predecessor_state)
    except GateNotReady as exc:
        operator.log.info("%s; rescheduled in %.0f s", exc, exc.retry_in_s)
        raise AirflowRescheduleException(datetime.now(UTC) + timedelta(seconds=exc.retry_in_s)) from exc
    except GateClosed as exc:
        raise (closed or AirflowSkipException)(str(exc)) from exc
    operator.log.info("%s: %s done after %.3f s here", step, after, waited)


class ZoneSwitchStepOperator(BaseOperator):
    """Runs one step of the zone switch protocol.

    A refusal that a retry cannot change (bad request, ZSIDs leased to another
    switch, an unhealthy guard, a push not acked before block/reshard's timeout)
    fails the task at once, without retries, so the rollback starts right away
    and the ZSIDs stay blocked no longer than needed. Anything else (a crash, a
    meta store blip) is retried: every step is idempotent.
    """

    step = ""
    ui_color = "#e8f1fb"
    final_errors: tuple[type[BaseException], ...] = (SwitchPlanError, LeaseConflict, SwitchError, UnhealthyGuards)

    gate_closed: type[BaseException] = AirflowSkipException

    def __init__(self, *, meta_conn_id: str = "zonesync_meta", after: str | None = None, **kwargs) -> None:
        """`after`: the task whose stamp this step waits for, when the DAG starts both together."""
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id
        self.after = after

    def run_step(self, context, **kw):
        ctx = switch_context(context, self.meta_conn_id)
        pass_gate(self, context, ctx, self.step, self.after, self.gate_closed)
        try:
            return run_step(ctx, self.step, **kw)
        except self.final_errors as exc:
            raise AirflowFailException(f"{self.step}: {exc}") from exc

    def execute(self, context):
        result = self.run_step(context)
        self.log.info("%s: %s", self.step, result)
        return result if isinstance(result, int | str | list | tuple | dict) else str(result)


class ZoneSwitchPreflightOperator(ZoneSwitchStepOperator):
    step = "preflight"

    def execute(self, context):
        sw = self.run_step(context)
        self.log.info("switch %s: ZSIDs %s %s -> %s leased", sw.run_id, sw.zsids, sw.from_zone, sw.to_zone)
        return sw.id


class ZoneSwitchRecordStateOperator(ZoneSwitchStepOperator):
    step = "record_state"


class ZoneSwitchBlockOperator(ZoneSwitchStepOperator):
    step = "block"
    ui_color = "#fbe8e8"
    final_errors = (*ZoneSwitchStepOperator.final_errors, AckTimeout)  # seed: roll back, do not retry


class ZoneSwitchReshardOperator(ZoneSwitchStepOperator):
    step = "reshard"
    ui_color = "#fbe8e8"
    final_errors = (*ZoneSwitchStepOperator.final_errors, AckTimeout)


class ZoneSwitchActivateOperator(ZoneSwitchStepOperator):
    """Past the point of no return: every failure is retried (S000-32); only losing the claim to a rollback is final."""

    step = "activate"
    ui_color = "#e8fbe9"
    final_errors = (RollbackStarted,)  # lost the phase claim to a rollback: retrying cannot change that
    gate_closed = AirflowFailException  # not activated: the run must end failed, verify upstream_failed


class ZoneSwitchVerifyStartOperator(ZoneSwitchStepOperator):
    """The check of the moved ZSIDs started; its run id, zones and tables for verify_check."""

    step = "verify_start"
    final_errors = (*ZoneSwitchStepOperator.final_errors, CheckRefused)


class ZoneSwitchVerifyOperator(ZoneSwitchStepOperator):
    """The check's result (the verify_check task's file) turned into the switch's outcome."""

    step = "verify"
    check_task = "verify_check"

    def execute(self, context):
        result = json.loads(Path(context["ti"].xcom_pull(task_ids=self.check_task)).read_text())
        report = self.run_step(context, result=result)
        self.log.info("verify: %s", report)
        return report


class ZoneSwitchRollbackOperator(ZoneSwitchStepOperator):
    step = "rollback"
    ui_color = "#fff3d6"
