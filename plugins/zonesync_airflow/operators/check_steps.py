"""Operators of the consistency check: one per step (zonesync.check.steps).

Each resolves the meta store and the zone connections when it runs and builds the
step's context from the run's params. A refusal (CheckRefused: a bad request) fails
the task at once; anything else is retried (every step is idempotent). `repair` (with the
param on) sets each differing row to its owner's row; `finish` reads the Spark job's
result file, records the outcome and fails the task when rows differ,
so the run shows red; `fail` (trigger rule one_failed) ends a run whose step failed
for good with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from zonesync.check import steps
from zonesync.check.request import CheckRefused, CheckRequest
from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.operators.actor import run_actor
from zonesync_airflow.operators.switch import ZoneConnections

STEPS = ("preflight", "record_start", "repair", "finish", "fail")


def check_context(context, meta_conn_id: str, zone_conn_prefix: str = "zonesync_zone_") -> steps.CheckContext:
    params = context["params"]
    dag_run = context["dag_run"]
    actor = run_actor(dag_run)  # the authenticated user, not a conf field (actor.py)
    return steps.CheckContext(
        meta=ZonesyncMetaHook(meta_conn_id).meta_config(),
        run_id=dag_run.run_id,
        request=CheckRequest(
            zones=tuple(params.get("zones") or ()),
            tables=tuple(params.get("tables") or ()),
            chunk_rows=int(params["chunk_rows"]),
            rows=bool(params["rows"]),
            repair=bool(params["repair"]),
            reason=params["reason"],
        ),
        zone_conn=ZoneConnections(zone_conn_prefix),
        actor=str(actor),
    )


class ZoneCheckStepOperator(BaseOperator):
    ui_color = "#fbf3e8"

    def __init__(self, *, step: str, meta_conn_id: str = "zonesync_meta", **kwargs) -> None:
        if step not in STEPS:
            raise ValueError(f"step {step!r} is not a check step ({', '.join(STEPS)})")
        super().__init__(**kwargs)
        self.step = step
        self.meta_conn_id = meta_conn_id

    def execute(self, context):
        ctx = check_context(context, self.meta_conn_id)
        try:
            if self.step == "preflight":
                run = steps.preflight(ctx)
                self.log.info("check %s: zones %s, tables %s", run.run_id, ", ".join(run.zones), ", ".join(run.tables))
                return {"zones": ",".join(run.zones), "tables": ",".join(run.tables)}
            if self.step == "record_start":
                run = steps.record_start(ctx)
                return {"cut_us": run.cut_us, "rules_version": run.rules_version, "start": run.start}
            if self.step == "repair":
                counts = steps.repair(ctx)
                self.log.info("check %s: repair %s", ctx.run_id, counts or "off")
                return counts
            if self.step == "fail":
                run = steps.fail(ctx, "a step failed: see the run's task logs")
                return None if run is None else run.status
            result = json.loads(Path(context["ti"].xcom_pull(task_ids="check")).read_text())
            run = steps.finish(ctx, result)
        except CheckRefused as exc:
            raise AirflowFailException(f"{self.step}: {exc}") from exc
        docs = (run.summary.get("_expectations") or {}).get("data_docs")
        self.log.info("check %s %s: %s (`zonesync check report %s`; Data Docs %s)", run.run_id, run.status,
                      run.detail, run.run_id, docs)  # fmt: skip
        if run.status != "succeeded":
            raise AirflowFailException(f"check {run.run_id} {run.status}: {run.detail}")
        return run.status
