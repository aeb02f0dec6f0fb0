"""Operators of the locating-entity migration (zonesync.migrate.steps).

Each resolves the meta store and the zone connections when it runs and builds the step's
context from the run's params (the tenant, the target zone, the mode, the reason).

`ZoneMigrationStepOperator` runs one step outside the stop-write window: preflight,
stop_first (plan2 only: writes stopped before the copy, refused above plan2_max_rows),
admit (the stock copy's Spark job follows), verify_start, verify (the check's Spark job
runs between them), release (after the cutover), rollback, and report (the
run's row, as `GET /zonesync/api/v1/migrations/{run_id}` shows it; the DAG's last task,
so a run whose cutover did not succeed ends failed). A failure a
retry cannot change (a refused request, a difference) fails the task at once, its reason
noted in the run's row, so the rollback task (one_failed) ends the run right away; a crash
or a meta store blip is retried (every step is idempotent). Rollback rolls forward when
the flip has happened: it lifts the stop-write in the target, so the tenant is never left
stopped (S004-26).

`ZoneMigrationCutoverOperator` is the stop-write window in one task: stop_write,
sync_position, synced, final_check, flip, lift, each still a recorded, idempotent step; a
task start between them would cost the tenant a second or more of stopped writes. It
waits for sync in the worker for `inline_s`, then defers to MigrationSyncedTrigger (the
worker slot freed) and goes on in `execute_complete`. Before the flip, a failure a retry
cannot change fails it at once for the rollback; from the flip on every failure is
retried, and a retry starts at the flip (the run's phase says where it is).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from zonesync.migrate import steps
from zonesync.migrate.request import MigrationRefused, MigrationRequest, parse_les
from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.operators.actor import run_actor
from zonesync_airflow.operators.switch import ZoneConnections
from zonesync_airflow.triggers.migration import MigrationGateTrigger, MigrationSyncedTrigger

STEPS = ("preflight", "stop_first", "admit", "verify_start", "verify", "release", "rollback", "report")
INLINE_POLL_S = 0.02  # the worker's poll while it waits for sync inside the window
PAST_FLIP = ("flipping", "lifted")


def migration_context(context, meta_conn_id: str, zone_conn_prefix: str = "zonesync_zone_") -> steps.MigrationContext:
    params = context["params"]
    dag_run = context["dag_run"]
    return steps.MigrationContext(
        meta=ZonesyncMetaHook(meta_conn_id).meta_config(),
        run_id=dag_run.run_id,
        request=MigrationRequest(
            "tenant",
            str(params["tenant"]),
            params["to_zone"],
            params["mode"],
            params["reason"],
            parse_les(params.get("les")),
        ),
        zone_conn=ZoneConnections(zone_conn_prefix),
        actor=str(run_actor(dag_run)),  # the authenticated user, not a conf field (actor.py)
        ack_timeout_s=float(params["ack_timeout_s"]),
        max_txn_ms=int(params["max_txn_ms"]),
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
        try:
            return self._run(context, ctx)
        except (MigrationRefused, steps.MigrationError) as exc:
            if self.step != "preflight":
                ctx.store.note_failure(ctx.run_id, self.step, str(exc))
            raise AirflowFailException(f"{self.step}: {exc}") from exc

    def _run(self, context, ctx: steps.MigrationContext):
        if self.step == "preflight":
            run = steps.preflight(ctx)
            self.log.info("migration %s: %s %s %s -> %s, %d locating entities", run.run_id, run.be_type, run.be_id,
                          run.source_zone, run.target_zone, len(run.les))  # fmt: skip
            return run.id
        if self.step == "stop_first":
            done = steps.stop_first(ctx, int(context["params"]["plan2_max_rows"]))
            self.log.info(
                "stop_first: %s", "writes stopped (plan2)" if "stop_version" in done else "plan1: writes go on"
            )
            return done
        if self.step == "admit":
            stock = steps.admit(ctx)
            self.log.info("admit: resident tables moving: %s", stock["tables"] or "none")
            return stock
        if self.step == "release":
            purged = steps.release(ctx, purge_source=not context["params"].get("keep_source_copy", False))
            self.log.info("release: the source's copy purged: %s", purged or "nothing resident")
            return purged
        if self.step == "verify_start":
            return steps.verify_start(ctx)
        if self.step == "verify":
            path = context["ti"].xcom_pull(task_ids="verify_check")  # None: skipped (plan2)
            report = steps.verify(ctx, json.loads(Path(path).read_text()) if path else None)
            self.log.info("verify: %s tables, no row differs", report["tables"])
            return {"tables": report["tables"], "differ": report["differ"]}
        if self.step == "report":
            doc = ctx.store.require(ctx.run_id).to_doc()
            self.log.info("migration %s %s: %s", ctx.run_id, doc["status"], doc["detail"])
            return doc
        outcome = steps.rollback(ctx)
        if outcome.startswith("not rolled back: flip has started"):
            run = steps.lift(ctx)  # past the point of no return: forward, never left stopped
            outcome = f"rolled forward: {run.detail}"
        self.log.info("rollback: %s", outcome)
        return outcome


class ZoneMigrationCutoverOperator(BaseOperator):
    """stop_write >> sync_position >> synced >> final_check >> flip >> lift, in one task."""

    ui_color = "#fbe8e8"

    def __init__(self, *, meta_conn_id: str = "zonesync_meta", inline_s: float = 5.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id
        self.inline_s = inline_s

    def execute(self, context):
        ctx = migration_context(context, self.meta_conn_id)
        if ctx.store.require(ctx.run_id).phase in PAST_FLIP:
            return self._past_flip(ctx)
        with _final_before_flip(ctx, "stop_write"):
            run = steps.stop_write(ctx)
            self.log.info("stop-write v%s acked by every guard", run.stop_version)
            position = steps.sync_position(ctx)
            self.log.info("sync position P = %s:%s", *position)
        timeout_s = float(context["params"]["sync_timeout_s"])
        started = time.monotonic()
        while time.monotonic() - started < min(self.inline_s, timeout_s):
            with _final_before_flip(ctx, "synced"):
                done = steps.synced(ctx)
            if done:
                self.log.info("synced after %.3f s (in the worker)", time.monotonic() - started)
                return self._finish(ctx)
            time.sleep(INLINE_POLL_S)
        run = ctx.store.require(ctx.run_id)
        self.defer(
            trigger=MigrationSyncedTrigger(
                run_id=ctx.run_id,
                source_zone=run.source_zone,
                target_zone=run.target_zone,
                position=list(position),
                timeout_s=timeout_s,
                meta_conn_id=self.meta_conn_id,
                waited_s=time.monotonic() - started,
            ),  # fmt: skip
            method_name="execute_complete",
            timeout=timedelta(seconds=timeout_s + 60),  # backstop: the trigger reports its own timeout
        )

    def execute_complete(self, context, event: dict | None = None):
        event = event or {}
        ctx = migration_context(context, self.meta_conn_id)
        waited = float(event.get("waited_s", 0))
        with _final_before_flip(ctx, "synced"):
            done = event.get("status") == "synced" and steps.synced(ctx)
            if not done:
                run = ctx.store.require(ctx.run_id)
                why = (f"zone {run.target_zone} did not apply zone {run.source_zone}'s stream up to P within "
                       f"{waited:.0f} s: is its applier running? (`zonesync lag`)")  # fmt: skip
                if event.get("failed"):  # the wait's last reads failed: it could not tell
                    why += f"; the last poll could not read: {event['failed']}"
                raise steps.MigrationError(why)
        self.log.info("synced after %.1f s", waited)
        return self._finish(ctx)

    def _finish(self, ctx: steps.MigrationContext):
        with _final_before_flip(ctx, "final_check"):
            counts = steps.final_check(ctx)
        self.log.info("final check: the LEs' rows agree: %s", counts)
        return self._past_flip(ctx)

    def _past_flip(self, ctx: steps.MigrationContext):
        try:
            run = steps.flip(ctx)
            self.log.info("flipped: unit %s (v%s), writes still stopped", run.target_zone, run.flip_version)
            run = steps.lift(ctx)
        except MigrationRefused as exc:  # lost the run to a rollback: retrying cannot change that
            raise AirflowFailException(f"flip: {exc}") from exc
        self.log.info("migration %s %s: %s", run.run_id, run.status, run.detail)
        return {"status": run.status, "window_ms": run.window_ms}


class ZoneMigrationGateOperator(BaseOperator):
    """The stop-write gate (migrate/gate.py): asked once in the worker; closed, the task
    defers to MigrationGateTrigger until it opens; at `gate_timeout_s` it fails for good
    with the gate's reason (nothing is stopped yet: the rollback ends the run)."""

    ui_color = "#fbf6e8"

    def __init__(self, *, meta_conn_id: str = "zonesync_meta", **kwargs) -> None:
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id

    def execute(self, context):
        ctx = migration_context(context, self.meta_conn_id)
        params = context["params"]
        with _final_before_flip(ctx, "gate"):
            why = steps.gate(ctx, float(params["max_lag_s"]), params["stop_window_utc"])
        if why is None:
            self.log.info("stop-write gate open")
            return "open"
        self.log.info("stop-write gate closed: %s; asking again in the triggerer", why)
        run = ctx.store.require(ctx.run_id)
        timeout_s = float(params["gate_timeout_s"])
        self.defer(
            trigger=MigrationGateTrigger(
                run_id=ctx.run_id,
                source_zone=run.source_zone,
                target_zone=run.target_zone,
                max_lag_s=float(params["max_lag_s"]),
                window=params["stop_window_utc"],
                timeout_s=timeout_s,
                meta_conn_id=self.meta_conn_id,
            ),  # fmt: skip
            method_name="execute_complete",
            timeout=timedelta(seconds=timeout_s + 60),  # backstop: the trigger reports its own timeout
        )

    def execute_complete(self, context, event: dict | None = None):
        event = event or {}
        if event.get("status") == "open":
            self.log.info("stop-write gate open after %.0f s", float(event.get("waited_s", 0)))
            return "open"
        ctx = migration_context(context, self.meta_conn_id)
        with _final_before_flip(ctx, "gate"):
            raise steps.MigrationError(f"the stop-write gate stayed closed for {float(event.get('waited_s', 0)):.0f} "
                                       f"s: {event.get('why', 'no answer')}")  # fmt: skip


@contextmanager
def _final_before_flip(ctx: steps.MigrationContext, step: str):
    """A refusal or a step's error before the flip: noted in the run's row, and the task
    failed for good (the rollback follows); anything else is left to the retries."""
    try:
        yield
    except (MigrationRefused, steps.MigrationError) as exc:
        ctx.store.note_failure(ctx.run_id, step, str(exc))
        raise AirflowFailException(f"{step}: {exc}") from exc
