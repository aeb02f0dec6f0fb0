"""ZoneSyncedTrigger: waits in the triggerer until every zone applied from_zone up to P.

The wait_sync step can last from a second to minutes (a lagging applier); a
worker slot should not sit on it. The trigger resolves the meta store and zone
connections once, asynchronously, then polls one `SyncProbe` (P, its LSNs and the
zones' connections, kept between polls) until no zone is behind or its own
deadline passes. It reports either outcome as an event; the sensor decides what
failure means, so a timeout carries which zones were behind.

The triggerer runs every trigger on one event loop: each blocking call (meta
store, zones) runs in a thread (`asyncio.to_thread`), zone connections come from
`Endpoint.connect()` with its connect and read timeouts, and the probe's
connections are closed when the trigger ends, is cancelled, or is cleaned up.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.hooks.zone import ZoneHook


class ZoneSyncedTrigger(BaseTrigger):
    def __init__(
        self,
        run_id: str,
        from_zone: str,
        to_zone: str,
        timeout_s: float,
        meta_conn_id: str = "zonesync_meta",
        zone_conn_prefix: str = "zonesync_zone_",
        poll_interval: float = 0.1,
        waited_s: float = 0.0,
    ):
        super().__init__()
        self.run_id = run_id
        self.from_zone = from_zone
        self.to_zone = to_zone
        self.timeout_s = timeout_s
        self.meta_conn_id = meta_conn_id
        self.zone_conn_prefix = zone_conn_prefix
        self.poll_interval = poll_interval
        self.waited_s = waited_s  # already waited in the worker, by its own monotonic clock
        self._probe = None
        self._probe_lock = threading.Lock()  # a poll in its thread and the close never overlap

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__name__}",
            {
                "run_id": self.run_id,
                "from_zone": self.from_zone,
                "to_zone": self.to_zone,
                "timeout_s": self.timeout_s,
                "meta_conn_id": self.meta_conn_id,
                "zone_conn_prefix": self.zone_conn_prefix,
                "poll_interval": self.poll_interval,
                "waited_s": self.waited_s,
            },
        )

    async def _open_probe(self):
        """A SyncProbe over this switch, every connection looked up without blocking the loop."""
        from zonesync.meta.store import MetaStore
        from zonesync.switch.steps import SwitchContext, SwitchParams, SyncProbe

        meta = await ZonesyncMetaHook(self.meta_conn_id).ameta_config()
        zones = await asyncio.to_thread(lambda: sorted(MetaStore(meta).zones()))
        endpoints = {
            zone: await ZoneHook.for_zone(zone, self.zone_conn_prefix).aendpoint()
            for zone in zones
            if zone != self.from_zone  # the probe asks only the zones that apply from_zone's stream
        }
        params = SwitchParams(zsids="", from_zone=self.from_zone, to_zone=self.to_zone, reason="wait_sync")
        ctx = SwitchContext(meta=meta, run_id=self.run_id, params=params, zone_conn=lambda z: endpoints[z].connect())
        return SyncProbe(ctx)

    def _behind(self) -> list[str]:
        """In a thread: one poll of the probe."""
        with self._probe_lock:
            if self._probe is None:
                raise RuntimeError("ZoneSyncedTrigger polled after cleanup")
            return self._probe.behind()

    def _close_probe(self) -> None:
        """In a thread: waits for a poll in flight (bounded by the endpoints' timeouts), then closes."""
        with self._probe_lock:
            probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()

    async def run(self):
        self._probe = await self._open_probe()
        try:
            # Deadlines by this process's monotonic clock only, never the worker's wall clock
            # against the triggerer's; a restarted triggerer waits the rest again (longer, safe).
            started = time.monotonic()
            while True:
                behind = await asyncio.to_thread(self._behind)
                waited = self.waited_s + time.monotonic() - started
                if not behind:
                    yield TriggerEvent({"status": "synced", "waited_s": waited})
                    return
                if waited >= self.timeout_s:
                    yield TriggerEvent({"status": "timeout", "behind": behind, "waited_s": waited})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:  # done, cancelled (CancelledError at an await) or closed by the triggerer
            await asyncio.shield(asyncio.to_thread(self._close_probe))

    async def cleanup(self) -> None:
        """Called by the triggerer whenever the trigger leaves it; closing twice is harmless."""
        await asyncio.to_thread(self._close_probe)
