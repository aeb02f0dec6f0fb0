"""Lag as the console shows it: now (apply_lag and capture_lag, as `zonesync lag` prints
them) and over the last hour (meta's lag_samples, written by the appliers)."""

from __future__ import annotations

import time

from zonesync.apply.tools.progress import STALE_AFTER_S, lag_report
from zonesync.capture import lag as capture_lag
from zonesync.meta import lag_samples
from zonesync.meta.db import MetaConfig


def now(meta: MetaConfig) -> dict:
    """Per zone pair the lag the appliers last reported (stale when the report is older than
    STALE_AFTER_S: its applier stopped, the real lag may only be larger), and per zone its
    replicator's capture lag."""
    pairs = [{"source": s, "target": t, "behind_events": ev, "behind_seconds": sec, "reported_s_ago": round(age, 1),
              "stale": old} for s, t, ev, sec, age, old in lag_report(meta)]  # fmt: skip
    capture = [{"zone": z, "behind_bytes": int(behind), "behind_seconds": float(sec), "reported_s_ago": round(age, 1),
                "stale": age > STALE_AFTER_S} for z, behind, sec, age in capture_lag.report(meta)]  # fmt: skip
    return {"pairs": pairs, "capture": capture}


def history(meta: MetaConfig, minutes: int = 60, at: float | None = None) -> dict:
    """Each zone pair's samples over the last `minutes`, oldest first: {"from": epoch s,
    "bucket_s": 10, "pairs": [{"source", "target", "points": [[bucket, events, seconds]]}]}.
    One range read of the primary key per pair (the pairs come from apply_lag: a few rows)."""
    since = lag_samples.bucket_of((time.time() if at is None else at) - minutes * 60)
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT DISTINCT source_zone, target_zone FROM apply_lag ORDER BY 1, 2")
            known = cur.fetchall()
            pairs = [{"source": s, "target": t, "points": lag_samples.read(cur, s, t, since)} for s, t in known]
    finally:
        conn.close()
    return {"from": since, "bucket_s": lag_samples.BUCKET_S, "pairs": pairs}
