"""ZoneSyncedSensor: the wait_sync step of the zone switch.

Started together with reshard, it first waits for T (zonesync.switch.gate).
Then it takes P (steps.sync_position: the margin after the BLOCK acks, then
from_zone's binlog position, recorded once). Then it succeeds once every zone
has applied from_zone's stream up to P; it fails when `sync_timeout_s` passes
first, naming the zones still behind, which sends the run to rollback (S000-30,
S000-31). The moved ZSIDs are writable nowhere meanwhile, so the usual case, a
few tens of milliseconds of replication lag, is polled in the worker for up to
`inline_s`; only a longer wait defers to ZoneSyncedTrigger and frees the worker
slot (a resumed task costs a task start). `deferrable=False` pokes instead.
"""

from __future__ import annotations

import time
from datetime import timedelta

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from zonesync.meta.store import MetaStore
from zonesync.switch.steps import SwitchError, SyncProbe, behind_zones, run_step
from zonesync.switch.store import SwitchStore
from zonesync_airflow.operators.switch import pass_gate, switch_context
from zonesync_airflow.triggers.switch import ZoneSyncedTrigger


class SyncTimeout(AirflowFailException):
    """Final: waiting again would only keep the ZSIDs blocked longer; roll back instead."""


class ZoneSyncedSensor(BaseSensorOperator):
    ui_color = "#f0e8fb"

    def __init__(
        self,
        *,
        meta_conn_id: str = "zonesync_meta",
        after: str | None = None,
        deferrable: bool = True,
        inline_s: float = 5.0,
        **kwargs,
    ) -> None:
        """`after`: the task whose stamp (T) this one waits for, when the DAG starts both together."""
        kwargs.setdefault("poke_interval", 0.2)
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id
        self.after = after
        self.deferrable = deferrable
        self.inline_s = inline_s
        self._ctx = None

    @staticmethod
    def _step(ctx, status: str | None, detail: str = "") -> None:
        store = SwitchStore(ctx.meta)
        sw = store.require(ctx.run_id)
        if status is None:
            store.step_started(sw.id, "wait_sync")
        else:
            store.step_finished(sw.id, "wait_sync", status, detail)

    def _fail(self, ctx, behind: list[str], waited: float):
        detail = (
            f"zones {', '.join(behind)} did not apply zone {ctx.params.from_zone}'s stream up to P "
            f"within {waited:.0f} s: is their applier running? (`zonesync lag`)"
        )
        self._step(ctx, "failed", detail)
        raise SyncTimeout(detail)

    def poke(self, context) -> bool:
        # execute() resolved the connections once; poking does not resolve them again
        if self._ctx is None:
            self._ctx = switch_context(context, self.meta_conn_id)
        return not behind_zones(self._ctx)

    def execute(self, context):
        ctx = self._ctx = switch_context(context, self.meta_conn_id)
        # every zone this task opens, looked up now: a lookup inside the window can wait seconds on a
        # supervisor blocked in a heartbeat to a stalled API server (it masks the password through it)
        ctx.zone_conn.resolve(MetaStore(ctx.meta).zones())
        pass_gate(self, context, ctx, "sync_position", self.after)
        try:
            position = run_step(ctx, "sync_position")
        except SwitchError as exc:  # a refusal; a meta store blip is retried instead
            raise AirflowFailException(f"sync_position: {exc}") from exc
        self.log.info("sync position P = %s:%s", *position)
        self._step(ctx, None)
        timeout_s = float(context["params"]["sync_timeout_s"])
        started = time.monotonic()
        with SyncProbe(ctx) as probe:  # P, its LSNs and the zones' connections, once for every poll
            while time.monotonic() - started < min(self.inline_s, timeout_s):
                if not probe.behind():
                    took = time.monotonic() - started
                    captured = probe.captured_after
                    self._step(ctx, "ok", f"synced after {took:.2f} s ({captured:.2f} s to capture P; in the worker)")
                    return True
                time.sleep(0.02)
        if not self.deferrable:
            self.timeout = timeout_s
            try:
                super().execute(context)
            except Exception as exc:
                if "timed out" in str(exc).lower() or type(exc).__name__ == "AirflowSensorTimeout":
                    self._fail(ctx, behind_zones(ctx), timeout_s)
                raise
            self._step(ctx, "ok", "synced")
            return True
        self.defer(
            trigger=ZoneSyncedTrigger(
                run_id=ctx.run_id,
                from_zone=ctx.params.from_zone,
                to_zone=ctx.params.to_zone,
                timeout_s=timeout_s,
                meta_conn_id=self.meta_conn_id,
                waited_s=time.monotonic() - started,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=timeout_s + 60),  # backstop: the trigger reports its own timeout
        )

    def execute_complete(self, context, event: dict | None = None):
        event = event or {}
        ctx = switch_context(context, self.meta_conn_id)
        if event.get("status") == "synced":
            self._step(ctx, "ok", f"synced after {event.get('waited_s', 0):.1f} s")
            return True
        self._fail(ctx, event.get("behind", ["?"]), float(event.get("waited_s", 0)))
