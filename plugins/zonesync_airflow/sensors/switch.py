"""ZoneSyncedSensor: the wait_sync step of the zone switch.

Started together with reshard, it first waits for T (zonesync.switch.gate).
Then it takes P (steps.sync_position: the margin after the BLOCK acks, then
from_zone's binlog position, recorded once). Then it succeeds once every zone
has applied from_zone's stream up to P; it fails when `sync_timeout_s` passes
first, naming the zones still behind, which sends the run to rollback (S000-30,
S000-31).

`execute` is three steps:

1. `_take_position`: gate, P, wait_sync recorded as started.
2. `_synced_in_worker`: the moved ZSIDs are writable nowhere meanwhile, and the
   usual wait is a few tens of milliseconds of replication lag, so the worker
   polls every 20 ms for up to `inline_s` (a deferral costs a task start, about
   a second: the switch's write-blocked window, p99 <= 2 s, depends on this).
3. The long wait: defer to ZoneSyncedTrigger, which frees the worker slot
   (`execute_complete` records its event), or with `deferrable=False` Airflow's
   own poke loop over `poke()`, whose timeout is recognised by its type
   (AirflowSensorTimeout).
"""

from __future__ import annotations

import time
from datetime import timedelta

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from zonesync.meta.store import MetaStore
from zonesync.switch.steps import SwitchContext, SwitchError, SyncProbe, behind_zones, run_step
from zonesync.switch.store import SwitchStore
from zonesync_airflow.operators.switch import pass_gate, switch_context
from zonesync_airflow.triggers.switch import ZoneSyncedTrigger

INLINE_POLL_S = 0.02  # the worker's poll while it waits inside the write-blocked window


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
        """`after`: the task whose stamp (T) this one waits for, when the DAG starts both together.
        `inline_s`: how long the worker itself waits for sync before the long wait."""
        kwargs.setdefault("poke_interval", 0.2)
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id
        self.after = after
        self.deferrable = deferrable
        self.inline_s = inline_s
        self._ctx = None

    def execute(self, context):
        ctx = self._take_position(context)
        timeout_s = float(context["params"]["sync_timeout_s"])
        started = time.monotonic()
        if self._synced_in_worker(ctx, min(self.inline_s, timeout_s)):
            return True
        if not self.deferrable:
            return self._poke_until_synced(context, ctx, timeout_s)
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

    def poke(self, context) -> bool:
        # execute() resolved the connections once; poking does not resolve them again
        if self._ctx is None:
            self._ctx = switch_context(context, self.meta_conn_id)
        return not behind_zones(self._ctx)

    def execute_complete(self, context, event: dict | None = None):
        event = event or {}
        ctx = switch_context(context, self.meta_conn_id)
        if event.get("status") == "synced":
            self._record(ctx, "ok", f"synced after {event.get('waited_s', 0):.1f} s")
            return True
        self._fail(ctx, event.get("behind", ["?"]), float(event.get("waited_s", 0)))

    def _take_position(self, context) -> SwitchContext:
        """Past the gate (T), P taken and wait_sync recorded as started."""
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
        self._record(ctx, None)
        return ctx

    def _synced_in_worker(self, ctx: SwitchContext, budget_s: float) -> bool:
        """True (and wait_sync recorded ok) once every zone reached P within `budget_s`."""
        started = time.monotonic()
        with SyncProbe(ctx) as probe:  # P, its LSNs and the zones' connections, once for every poll
            while time.monotonic() - started < budget_s:
                if not probe.behind():
                    took = time.monotonic() - started
                    captured = probe.captured_after
                    self._record(ctx, "ok", f"synced after {took:.2f} s ({captured:.2f} s to capture P; in the worker)")
                    return True
                time.sleep(INLINE_POLL_S)
        return False

    def _poke_until_synced(self, context, ctx: SwitchContext, timeout_s: float) -> bool:
        """deferrable=False: BaseSensorOperator's loop over poke(), its timeout a failed wait_sync."""
        self.timeout = timeout_s
        try:
            super().execute(context)
        except AirflowSensorTimeout:
            self._fail(ctx, behind_zones(ctx), timeout_s)
        self._record(ctx, "ok", "synced")
        return True

    @staticmethod
    def _record(ctx: SwitchContext, status: str | None, detail: str = "") -> None:
        """wait_sync's record in meta: started (status None), or finished with `status`."""
        store = SwitchStore(ctx.meta)
        sw = store.require(ctx.run_id)
        if status is None:
            store.step_started(sw.id, "wait_sync")
        else:
            store.step_finished(sw.id, "wait_sync", status, detail)

    def _fail(self, ctx: SwitchContext, behind: list[str], waited: float):
        detail = (
            f"zones {', '.join(behind)} did not apply zone {ctx.params.from_zone}'s stream up to P "
            f"within {waited:.0f} s: is their applier running? (`zonesync lag`)"
        )
        self._record(ctx, "failed", detail)
        raise SyncTimeout(detail)
