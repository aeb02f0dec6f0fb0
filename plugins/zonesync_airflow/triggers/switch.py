"""ZoneSyncedTrigger: waits in the triggerer until every zone applied from_zone up to P.

The wait_sync step can last from a second to minutes (a lagging applier); a
worker slot should not sit on it. The trigger resolves the meta store and zone
connections once, asynchronously, then polls `behind_zones` in a thread (the
check is a handful of short queries) until no zone is behind or its own deadline
passes. It reports either outcome as an event; the sensor decides what failure
means, so a timeout carries which zones were behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from zonesync_airflow.hooks.meta import ZonesyncMetaHook, meta_config_of


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

    async def _context(self):
        import pymysql

        from zonesync.meta.store import MetaStore
        from zonesync.switch.steps import SwitchContext, SwitchParams

        meta = await ZonesyncMetaHook(self.meta_conn_id).ameta_config()
        zones = await asyncio.to_thread(lambda: sorted(MetaStore(meta).zones()))
        endpoints = {}
        for zone in zones:
            if zone != self.from_zone:
                conn = await ZonesyncMetaHook.aget_connection(f"{self.zone_conn_prefix}{zone}")
                endpoints[zone] = dataclasses.replace(meta_config_of(conn), database=conn.schema or "zonesync_app")

        def zone_conn(zone: str):
            ep = endpoints[zone]
            return pymysql.connect(
                host=ep.host, port=ep.port, user=ep.user, password=ep.password, database=ep.database, autocommit=True
            )

        params = SwitchParams(zsids="", from_zone=self.from_zone, to_zone=self.to_zone, reason="wait_sync")
        return SwitchContext(meta=meta, run_id=self.run_id, params=params, zone_conn=zone_conn)

    async def run(self):
        from zonesync.switch.steps import behind_zones

        ctx = await self._context()
        # Deadlines by this process's monotonic clock only, never the worker's wall clock
        # against the triggerer's; a restarted triggerer waits the rest again (longer, safe).
        started = time.monotonic()
        while True:
            behind = await asyncio.to_thread(behind_zones, ctx)
            waited = self.waited_s + time.monotonic() - started
            if not behind:
                yield TriggerEvent({"status": "synced", "waited_s": waited})
                return
            if waited >= self.timeout_s:
                yield TriggerEvent({"status": "timeout", "behind": behind, "waited_s": waited})
                return
            await asyncio.sleep(self.poll_interval)
