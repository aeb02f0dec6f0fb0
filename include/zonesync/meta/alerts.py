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
