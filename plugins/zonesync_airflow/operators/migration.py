"""Operators of the locating-entity migration: one per step (zonesync.migrate.steps).

Each resolves the meta store and the zone connections when it runs and builds the step's
context from the run's params (the tenant, the target zone, the mode, the reason). Before
the flip, a failure that a retry cannot change (a refused request, a push not acked, a
difference found by verify) fails the task at once, its reason noted in the run's row, so
the rollback task (trigger rule one_failed) starts right away and the tenant is stopped no
longer than needed; a crash or a meta store blip is retried (every step is idempotent).
flip and lift are past the point of no return: they retry everything but losing the run
to a rollback.
"""

from __future__ import annotations

import json
from pathlib import Path

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from zonesync.migrate import steps
from zonesync.migrate.request import MigrationRefused, MigrationRequest
from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.operators.actor import run_actor
from zonesync_airflow.operators.switch import ZoneConnections

BEFORE_FLIP = ("preflight", "stop_write", "sync_position", "verify_start", "verify")
AFTER_FLIP = ("flip", "lift")
STEPS = (*BEFORE_FLIP, *AFTER_FLIP, "rollback")


def migration_context(context, meta_conn_id: str, zone_conn_prefix: str = "zonesync_zone_") -> steps.MigrationContext:
    params = context["params"]
    dag_run = context["dag_run"]
    return steps.MigrationContext(
        meta=ZonesyncMetaHook(meta_conn_id).meta_config(),
        run_id=dag_run.run_id,
        request=MigrationRequest("tenant", str(params["tenant"]), params["to_zone"], params["mode"], params["reason"]),
        zone_conn=ZoneConnections(zone_conn_prefix),
        actor=str(run_actor(dag_run)),  # the authenticated user, not a conf field (actor.py)
        ack_timeout_s=float(params["ack_timeout_s"]),
    )


class ZoneMigrationStepOperator(BaseOperator):
    ui_color = "#e8fbf4"

    def __init__(self, *, step: str, meta_conn_id: str = "zonesync_meta", **kwargs) -> None:
        if step not in STEPS:
            raise ValueError(f"step {step!r} is not a migration step ({', '.join(STEPS)})")
        super().__init__(**kwargs)
        self.step = step
        self.meta_conn_id = meta_conn_id

    def execute(self, context):
        ctx = migration_context(context, self.meta_conn_id)
        final = (MigrationRefused, steps.MigrationError) if self.step in BEFORE_FLIP else (MigrationRefused,)
        try:
            return self._run(context, ctx)
        except final as exc:
            if self.step != "preflight":
                ctx.store.note_failure(ctx.run_id, self.step, str(exc))
            raise AirflowFailException(f"{self.step}: {exc}") from exc

    def _run(self, context, ctx: steps.MigrationContext):
        if self.step == "preflight":
            run = steps.preflight(ctx)
            self.log.info("migration %s: %s %s %s -> %s, %d locating entities", run.run_id, run.be_type, run.be_id,
                          run.source_zone, run.target_zone, len(run.les))  # fmt: skip
            return run.id
        if self.step == "stop_write":
            run = steps.stop_write(ctx)
            self.log.info("stop-write v%s acked by every guard at %s", run.stop_version, run.stopped_at)
            return run.stop_version
        if self.step == "verify_start":
            return steps.verify_start(ctx)
        if self.step == "verify":
            result = json.loads(Path(context["ti"].xcom_pull(task_ids="verify_check")).read_text())
            report = steps.verify(ctx, result)
            self.log.info("verify: %s tables, no row differs", report["tables"])
            return {"tables": report["tables"], "differ": report["differ"]}
        if self.step == "flip":
            run = steps.flip(ctx)
            self.log.info("flipped: unit %s (v%s), writes still stopped", run.target_zone, run.flip_version)
            return run.flip_version
        if self.step == "lift":
            run = steps.lift(ctx)
            self.log.info("migration %s %s: %s", run.run_id, run.status, run.detail)
            return {"status": run.status, "window_ms": run.window_ms}
        if self.step == "rollback":
            outcome = steps.rollback(ctx)
            self.log.info("rollback: %s", outcome)
            return outcome
        raise ValueError(f"step {self.step!r} runs in a sensor")
