"""Alerts: what a worker cannot fix itself and an operator must see (`zonesync alerts`)."""

from __future__ import annotations

import json
import logging

from zonesync.meta.db import MetaConfig

log = logging.getLogger("zonesync.alerts")


def record(meta: MetaConfig, zone: str, kind: str, detail: dict) -> None:
    """Log the alert and store it in meta's `alerts` table (raises if meta is unreachable)."""
    log.error("ALERT %s in zone %s: %s", kind, zone, detail)
    meta.run(
        "INSERT INTO alerts (zone, kind, detail) VALUES (%s, %s, %s)",
        (zone, kind, json.dumps(detail, default=str)),
    )


def open_alerts(meta: MetaConfig, limit: int = 100, zone: str | None = None) -> list[dict]:
    """Alerts not acknowledged yet, oldest first (the open-alerts index), at most `limit`."""
    where, args = "acked = 0", []
    if zone is not None:
        where, args = where + " AND zone = %s", [zone]
    rows, _ = meta.run(
        f"SELECT id, at, zone, kind, detail FROM alerts WHERE {where} ORDER BY acked, at, id LIMIT %s",
        (*args, int(limit)),
    )
    return [{"id": int(i), "at": at.isoformat(), "zone": z, "kind": k, "detail": _detail(d)} for i, at, z, k, d in rows]


def _detail(raw: str | None):
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {"text": raw}


def ack(meta: MetaConfig, alert_id: int) -> bool:
    """Acknowledge one alert; False when there is no such alert."""
    with meta.transaction() as cur:
        cur.execute("SELECT acked FROM alerts WHERE id = %s FOR UPDATE", (int(alert_id),))
        found = cur.fetchone()
        if found is None:
            return False
        cur.execute("UPDATE alerts SET acked = 1 WHERE id = %s", (int(alert_id),))
    return True
