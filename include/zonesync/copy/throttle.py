"""A copy that keeps out of the others' way (seed S000-78: 不影响其他 Zone 正常运行).

Before each wave of chunks the row copy looks at the replication lag every applier
reports to meta (apply_lag, refreshed each second) and waits while any zone other
than the copy's target lags more than `max_lag_s`: the copy's reads load the source
and its merges the target's disk, and the zones' own replication goes first. The
target's own appliers are not looked at: they replay from the copy's start
positions, so they lag by design until the copy catches up.
"""

from __future__ import annotations

import time

# reports older than this are not trusted as current (an applier that stopped reporting
# is the lag alert's business, not a reason to stop the copy for ever)
FRESH_S = 10


def worst_lag(meta, target: str) -> tuple[str, str, float] | None:
    """(source, target zone, seconds) of the worst fresh lag outside the copy's target."""
    rows, _ = meta.run(
        "SELECT source_zone, target_zone, behind_seconds FROM apply_lag WHERE target_zone <> %s "
        "AND updated_at > NOW(6) - INTERVAL %s SECOND ORDER BY behind_seconds DESC LIMIT 1",
        (target, FRESH_S),
    )
    return (rows[0][0], rows[0][1], float(rows[0][2])) if rows else None


def wait_for_lag(meta, target: str, max_lag_s: float, log=print, poll_s: float = 0.5) -> float:
    """Wait while another zone lags more than `max_lag_s`; the seconds waited."""
    if max_lag_s <= 0:
        return 0.0
    started, said = time.monotonic(), 0.0
    while True:
        worst = worst_lag(meta, target)
        if worst is None or worst[2] <= max_lag_s:
            return time.monotonic() - started
        waited = time.monotonic() - started
        if waited - said >= 10 or said == 0.0:
            log(f"throttled: {worst[0]} -> {worst[1]} lags {worst[2]:.1f} s (over {max_lag_s:g} s); waiting")
            said = waited or 1e-9
        time.sleep(poll_s)
