"""MigrationSyncedSensor: the migration's sync_position and synced steps.

It takes P itself (steps.sync_position: the rules' maximum transaction time after the
stop-write's acks, then the source's binlog position, recorded once), so no task start
falls between the two. Then it waits until the target applied the source's stream up to
P: first in the worker, polling every 20 ms for up to `inline_s` (the tenant is writable
nowhere meanwhile, and the usual wait is tens of milliseconds), then deferred to
MigrationSyncedTrigger, which frees the worker slot. `sync_timeout_s` passing first
fails the task for good, its reason noted, and the rollback runs.
"""

from __future__ import annotations

import time
from datetime import timedelta

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from zonesync.migrate import steps
from zonesync_airflow.operators.migration import migration_context
from zonesync_airflow.triggers.migration import MigrationSyncedTrigger

INLINE_POLL_S = 0.02


class MigrationSyncedSensor(BaseSensorOperator):
    ui_color = "#f0e8fb"

    def __init__(self, *, meta_conn_id: str = "zonesync_meta", inline_s: float = 5.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id
        self.inline_s = inline_s

    def execute(self, context):
        ctx = migration_context(context, self.meta_conn_id)
        timeout_s = float(context["params"]["sync_timeout_s"])
        try:
            position = steps.sync_position(ctx)
        except steps.MigrationError as exc:  # a refusal; a meta store blip is retried instead
            self._fail(ctx, str(exc))
        self.log.info("sync position P = %s:%s", *position)
        started = time.monotonic()
        while time.monotonic() - started < min(self.inline_s, timeout_s):
            if steps.synced(ctx):
                self.log.info("synced after %.2f s (in the worker)", time.monotonic() - started)
                return True
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
        if event.get("status") == "synced" and steps.synced(ctx):
            self.log.info("synced after %.1f s", float(event.get("waited_s", 0)))
            return True
        run = ctx.store.require(ctx.run_id)
        waited = float(event.get("waited_s", 0))
        self._fail(ctx, f"zone {run.target_zone} did not apply zone {run.source_zone}'s stream up to P within "
                        f"{waited:.0f} s: is its applier running? (`zonesync lag`)")  # fmt: skip

    def _fail(self, ctx: steps.MigrationContext, detail: str):
        ctx.store.note_failure(ctx.run_id, "synced", detail)
        raise AirflowFailException(f"synced: {detail}")
