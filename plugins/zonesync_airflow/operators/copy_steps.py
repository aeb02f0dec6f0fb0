"""Operators of the online full copy: one per step (zonesync.copy.steps).

Each resolves the meta store and the zone connections when it runs, builds the
step's context from the run's params, and runs the step. A refusal a retry cannot
change (CopyRefused: a bad request, a topic that no longer holds the start, a
verify that found differences) fails the task at once, so the rollback task starts;
anything else is retried (every step is idempotent). The catch-up wait is a sensor
in reschedule mode: it frees its worker slot between looks.
"""

from __future__ import annotations

from airflow.sdk import BaseOperator, BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from zonesync.copy import steps
from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.operators.actor import run_actor
from zonesync_airflow.operators.switch import ZoneConnections
from zonesync_airflow.operators.task_states import failed_tasks


def copy_context(context, meta_conn_id: str, zone_conn_prefix: str = "zonesync_zone_") -> steps.CopyContext:
    params = context["params"]
    dag_run = context["dag_run"]
    actor = run_actor(dag_run)  # the authenticated user, not a conf field (actor.py)
    return steps.CopyContext(
        meta=ZonesyncMetaHook(meta_conn_id).meta_config(),
        run_id=dag_run.run_id,
        request=CopyRequest(
            source_zone=params["from_zone"],
            target_zone=params["to_zone"],
            tables=tuple(params.get("tables") or ()),
            mode=params["mode"],
            reason=params["reason"],
            chunk_rows=int(params["chunk_rows"]),
        ),
        zone_conn=ZoneConnections(zone_conn_prefix),
        actor=str(actor),
    )


class ZoneCopyStepOperator(BaseOperator):
    """Runs one step of the full copy: preflight, record_start, start_incremental, prune,
    verify, join or rollback."""

    ui_color = "#e8fbef"

    def __init__(self, *, step: str, meta_conn_id: str = "zonesync_meta", **kwargs) -> None:
        if step not in ("preflight", "record_start", "start_incremental", "prune", "verify", "join", "rollback"):
            raise ValueError(f"step {step!r} is not a copy step")
        super().__init__(**kwargs)
        self.step = step
        self.meta_conn_id = meta_conn_id

    def execute(self, context):
        ctx = copy_context(context, self.meta_conn_id)
        try:
            if self.step == "rollback":
                result = steps.rollback(ctx, f"failed: {', '.join(self._failed(context)) or 'an earlier step'}")
            else:
                result = getattr(steps, self.step)(ctx)
        except CopyRefused as exc:
            raise AirflowFailException(f"{self.step}: {exc}") from exc
        if self.step == "preflight":
            self.log.info("copy %s: %s -> %s, tables %s", result.run_id, result.source_zone, result.target_zone,
                          ", ".join(result.tables))  # fmt: skip
            return ",".join(result.tables)  # the row copy's --table
        self.log.info("%s: %s", self.step, result)
        return result if isinstance(result, int | str | list | dict) else str(result)

    def _failed(self, context) -> list[str]:
        """The run's tasks upstream of this one that failed (the rollback's reason)."""
        return failed_tasks(context, self.upstream_task_ids)


class ZoneCopyCaughtUpSensor(BaseSensorOperator):
    """The target has applied every source up to where each stood when the row copy
    ended; logs the copy's progress at each look."""

    ui_color = "#f0e8fb"

    def __init__(self, *, meta_conn_id: str = "zonesync_meta", timeout_param: str = "catch_up_timeout_s", **kwargs):
        kwargs.setdefault("poke_interval", 2)
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id
        self.timeout_param = timeout_param

    def execute(self, context):
        self.timeout = float(context["params"].get(self.timeout_param) or self.timeout)
        return super().execute(context)

    def poke(self, context) -> bool:
        ctx = copy_context(context, self.meta_conn_id)
        try:
            done = steps.caught_up(ctx)
        except CopyRefused as exc:
            raise AirflowFailException(f"catch_up: {exc}") from exc
        self.log.info("catch_up: the target has %s applied every source up to the row copy's end",
                      "" if done else "not yet")  # fmt: skip
        return done
