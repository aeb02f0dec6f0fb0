"""The stop-write gate (seed 004 step 5, S004-15): a migration stops the tenant's writes
only when the target keeps up with the source and the clock is inside the operator's
window; otherwise writes go on and the gate is asked again, until it opens or its
timeout rolls the run back (nothing stopped). A stop never waits out an unbounded drain:
the cutover's sync after the stop is then a matter of the lag the gate allowed.

    lag      every partition of the source's stream, as the target's applier reports it
             to meta (apply_lag, refreshed each second), at most `max_lag_s` behind; a
             report older than FRESH_S closes the gate (an applier that stopped
             reporting is no proof of keeping up)
    window   "HH:MM-HH:MM" in UTC (may wrap midnight), or "" for any time
"""

from __future__ import annotations

import datetime
import re

from zonesync.copy.throttle import FRESH_S  # the age past which a lag report is not current

WINDOW = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


class GateSpecError(ValueError):
    """A malformed window: the message names the field and the fix."""


def parse_window(text: str) -> tuple[int, int] | None:
    """(start, end) in minutes of the UTC day, or None for any time."""
    if not text:
        return None
    m = WINDOW.match(text)
    if not m:
        raise GateSpecError(f"stop_window_utc: {text!r} is not HH:MM-HH:MM (UTC, e.g. 02:00-04:30), or '' for any time")
    start, end = int(m[1]) * 60 + int(m[2]), int(m[3]) * 60 + int(m[4])
    if start == end:
        raise GateSpecError(f"stop_window_utc: {text!r} is empty: give two different times, or '' for any time")
    return start, end


def in_window(window: tuple[int, int] | None, now: datetime.datetime) -> bool:
    if window is None:
        return True
    minute = now.hour * 60 + now.minute
    start, end = window
    return start <= minute < end if start < end else (minute >= start or minute < end)


def worst_lag(meta, source_zone: str, target_zone: str) -> tuple[float | None, int]:
    """(the worst fresh behind_seconds of the target applying the source, stale reports)."""
    rows, _ = meta.run(
        "SELECT behind_seconds, updated_at > NOW(6) - INTERVAL %s SECOND FROM apply_lag "
        "WHERE source_zone = %s AND target_zone = %s",
        (FRESH_S, source_zone, target_zone),
    )
    fresh = [float(b) for b, ok in rows if ok]
    return (max(fresh) if fresh else None), sum(1 for _, ok in rows if not ok)


def closed_because(meta, source_zone: str, target_zone: str, max_lag_s: float, window_text: str,
                   now: datetime.datetime | None = None) -> str | None:  # fmt: skip
    """Why the gate is closed now, or None when it is open."""
    now = now or datetime.datetime.now(datetime.UTC)
    if not in_window(parse_window(window_text), now):
        return f"outside the stop-write window {window_text} UTC (now {now:%H:%M} UTC)"
    worst, stale = worst_lag(meta, source_zone, target_zone)
    if stale or worst is None:
        return (f"zone {target_zone}'s applier has no fresh lag report for zone {source_zone}'s stream "
                f"({stale} partitions older than {FRESH_S} s): is it running? (`zonesync lag`)")  # fmt: skip
    if worst > max_lag_s:
        return f"zone {target_zone} lags zone {source_zone} by {worst:.1f} s (more than max_lag_s {max_lag_s:g})"
    return None
