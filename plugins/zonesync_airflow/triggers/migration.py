"""MigrationSyncedTrigger: waits in the triggerer until the migration's target zone applied
the source's stream up to P (the position recorded by sync_position).

The wait is usually a few tens of milliseconds of replication lag, but a lagging or
halted applier makes it minutes; the triggerer, not a worker slot, sits on it. The meta
store and the target's connection are resolved once, asynchronously; each poll
(zonesync.apply.tools.progress.is_applied) runs in a thread on one connection kept
between polls, closed when the trigger ends, is cancelled or is cleaned up. A poll whose
read fails (meta or the target unreachable, the connection lost or killed) is no answer:
not synced, the connection dropped and made again at the next poll, as the zone switch's
SyncProbe does; the wait goes on to its timeout, whose event names the last failed read.
Either outcome is an event (synced, or timeout with how long it waited); the sensor
decides what a timeout means.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from zonesync.meta.db import META_DOWN
from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.hooks.zone import ZoneHook


class MigrationSyncedTrigger(BaseTrigger):
    def __init__(self, run_id: str, source_zone: str, target_zone: str, position: list, timeout_s: float,
                 meta_conn_id: str = "zonesync_meta", zone_conn_prefix: str = "zonesync_zone_",
                 poll_interval: float = 0.1, waited_s: float = 0.0):  # fmt: skip
        super().__init__()
        self.run_id = run_id
        self.source_zone = source_zone
        self.target_zone = target_zone
        self.position = list(position)
        self.timeout_s = timeout_s
        self.meta_conn_id = meta_conn_id
        self.zone_conn_prefix = zone_conn_prefix
        self.poll_interval = poll_interval
        self.waited_s = waited_s  # already waited in the worker, by its own monotonic clock
        self._endpoint = None
        self._conn = None
        self._closed = False
        self._lock = threading.Lock()  # a poll in its thread and the close never overlap
        self.failed: str | None = None  # the last poll's failed read, while polls fail

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__name__}",
            {
                "run_id": self.run_id,
                "source_zone": self.source_zone,
                "target_zone": self.target_zone,
                "position": self.position,
                "timeout_s": self.timeout_s,
                "meta_conn_id": self.meta_conn_id,
                "zone_conn_prefix": self.zone_conn_prefix,
                "poll_interval": self.poll_interval,
                "waited_s": self.waited_s,
            },
        )

    def _applied(self, meta) -> bool:
        """In a thread: one poll on the kept connection (made again when a poll lost it); a
        failed read is not synced."""
        from zonesync.apply.tools.progress import is_applied

        with self._lock:
            if self._closed:
                raise RuntimeError("MigrationSyncedTrigger polled after cleanup")
            try:
                if self._conn is None:
                    self._conn = self._endpoint.connect()
                done = is_applied(meta, self._conn, self.source_zone, (self.position[0], int(self.position[1])))
                self._conn.commit()  # the next poll reads a new snapshot
            except META_DOWN as exc:
                self.failed = f"{type(exc).__name__}: {exc}"
                self.log.warning("migration %s: synced poll failed, asking again: %s", self.run_id, self.failed)
                self._drop()
                return False
            self.failed = None
            return done

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()

    async def run(self):
        meta = await ZonesyncMetaHook(self.meta_conn_id).ameta_config()
        self._endpoint = await ZoneHook.for_zone(self.target_zone, self.zone_conn_prefix).aendpoint()
        try:
            started = time.monotonic()  # this process's clock only; a restarted triggerer waits the rest again
            while True:
                done = await asyncio.to_thread(self._applied, meta)
                waited = self.waited_s + time.monotonic() - started
                if done:
                    yield TriggerEvent({"status": "synced", "waited_s": waited})
                    return
                if waited >= self.timeout_s:
                    yield TriggerEvent({"status": "timeout", "waited_s": waited, "failed": self.failed})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:  # done, cancelled (CancelledError at an await) or closed by the triggerer
            await asyncio.shield(asyncio.to_thread(self._close))

    async def cleanup(self) -> None:
        """Called by the triggerer whenever the trigger leaves it; closing twice is harmless."""
        await asyncio.to_thread(self._close)


class MigrationGateTrigger(BaseTrigger):
    """Waits in the triggerer until a migration's stop-write gate opens (migrate/gate.py:
    the target keeps up with the source, the clock inside the window) or `timeout_s`
    passes. Each poll is one meta read in a thread (MetaConfig connects per query: nothing
    is kept open between polls, nothing to clean up). The event says which, with the
    gate's last reason."""

    def __init__(self, run_id: str, source_zone: str, target_zone: str, max_lag_s: float, window: str,
                 timeout_s: float, meta_conn_id: str = "zonesync_meta", poll_interval: float = 1.0,
                 waited_s: float = 0.0):  # fmt: skip
        super().__init__()
        self.run_id = run_id
        self.source_zone = source_zone
        self.target_zone = target_zone
        self.max_lag_s = max_lag_s
        self.window = window
        self.timeout_s = timeout_s
        self.meta_conn_id = meta_conn_id
        self.poll_interval = poll_interval
        self.waited_s = waited_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__name__}",
            {
                "run_id": self.run_id,
                "source_zone": self.source_zone,
                "target_zone": self.target_zone,
                "max_lag_s": self.max_lag_s,
                "window": self.window,
                "timeout_s": self.timeout_s,
                "meta_conn_id": self.meta_conn_id,
                "poll_interval": self.poll_interval,
                "waited_s": self.waited_s,
            },
        )

    async def run(self):
        from zonesync.migrate.gate import closed_because

        meta = await ZonesyncMetaHook(self.meta_conn_id).ameta_config()
        started = time.monotonic()
        while True:
            why = await asyncio.to_thread(closed_because, meta, self.source_zone, self.target_zone, self.max_lag_s,
                                          self.window)  # fmt: skip
            waited = self.waited_s + time.monotonic() - started
            if why is None:
                yield TriggerEvent({"status": "open", "waited_s": waited})
                return
            if waited >= self.timeout_s:
                yield TriggerEvent({"status": "timeout", "waited_s": waited, "why": why})
                return
            await asyncio.sleep(self.poll_interval)
