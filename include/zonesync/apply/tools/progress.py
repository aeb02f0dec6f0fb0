"""Has a zone applied everything another zone wrote up to a binlog position?

`wait_applied(source_zone, position)` is what a zone switch's wait_sync sensor
asks after it read from_zone's binlog position P: find the first replicator
checkpoint at or past P (so every event up to P was published), take the last
LSN it records per partition, and wait until the target's apply_state has
reached each of them. It never trusts Kafka offsets or lag estimates.
"""

from __future__ import annotations

import time

from zonesync.capture.checkpoints import CheckpointStore
from zonesync.events import file_number
from zonesync.meta.db import MetaConfig


def targets_reached(meta: MetaConfig, source_zone: str, position: tuple[str, int]) -> dict[int, int] | None:
    """Per-partition LSNs that cover everything up to `position`, or None if not captured yet."""
    file_number(position[0])  # a malformed position fails here, loudly
    store = CheckpointStore(meta, source_zone)
    try:
        # a position read by binlog_end knows its server: never compared with another's
        cp = store.first_at_or_past(position[0], position[1], getattr(position, "server_id", None))
    finally:
        store.close()
    return None if cp is None else dict(cp.partition_lsns)


def applied_lsns(target_conn, source_zone: str) -> dict[int, int]:
    with target_conn.cursor() as cur:
        cur.execute("SELECT partition_no, applied_lsn FROM zonesync.apply_state WHERE source_zone = %s", (source_zone,))
        rows = cur.fetchall()
    target_conn.commit()
    return {int(p): int(lsn) for p, lsn in rows}


def covers(applied: dict[int, int], needed: dict[int, int]) -> bool:
    """Has every partition applied at least the LSN `needed` names for it?"""
    return all(applied.get(p, 0) >= lsn for p, lsn in needed.items())


def is_applied(meta: MetaConfig, target_conn, source_zone: str, position: tuple[str, int]) -> bool:
    needed = targets_reached(meta, source_zone, position)
    if needed is None:
        return False
    return covers(applied_lsns(target_conn, source_zone), needed)


def wait_applied(meta: MetaConfig, target_conn, source_zone: str, position: tuple[str, int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if is_applied(meta, target_conn, source_zone, position):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def resume(target_conn, source_zone: str, partitions: list[int] | None = None) -> list[int]:
    """Set halted partitions of a source back to running (all of them, or those listed);
    returns the partitions resumed. A running applier notices within a second and takes
    them back from their applied LSN; whatever halted them (a gap no resend can repair, a
    missing table) halts them again if it is still there."""
    return _set_status(target_conn, source_zone, partitions, "halted", "running", "")


def halt(target_conn, source_zone: str, partitions: list[int] | None, why: str) -> list[int]:
    """An operator's ROLLBACK (seed S003-33): set running partitions of a source halted (all
    of them, or those listed); returns the partitions halted now (halting a halted one is a
    no-op). Taken under the partitions' apply_state row locks, as every batch claims them:
    a batch that claimed one first commits first, every later one finds it halted and
    writes nothing (apply_state.PartitionHalted). The applier pauses it within a second."""
    return _set_status(target_conn, source_zone, partitions, "running", "halted", why[:500])


def _set_status(target_conn, source_zone: str, partitions, old: str, new: str, detail: str) -> list[int]:
    """Partitions of a source in status `old` (all, or those listed) set to `new`, under
    their apply_state row locks; returns them."""
    with target_conn.cursor() as cur:
        cur.execute(
            "SELECT partition_no FROM zonesync.apply_state WHERE source_zone = %s AND status = %s "
            "ORDER BY partition_no FOR UPDATE",
            (source_zone, old),
        )
        found = [int(r[0]) for r in cur.fetchall()]
        chosen = [p for p in found if partitions is None or p in partitions]
        if chosen:
            cur.execute(
                "UPDATE zonesync.apply_state SET status = %s, detail = %s WHERE source_zone = %s "
                f"AND partition_no IN ({', '.join(str(p) for p in chosen)})",
                (new, detail, source_zone),
            )
    target_conn.commit()
    return chosen


# An applier reports its lag every second; a report older than this is a stopped or stuck one.
STALE_AFTER_S = 3.0


def lag_report(meta: MetaConfig) -> list[tuple[str, str, int, float, float, bool]]:
    """(source, target, events behind, seconds behind, report age in s, stale) per pair of
    zones, from what the appliers last reported. A stale pair's figures are those of its
    last report: its applier has stopped reporting, so the real lag may only be larger."""
    rows, _ = meta.run(
        "SELECT source_zone, target_zone, SUM(behind_events), MAX(behind_seconds), "
        "MAX(TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6))) / 1e6 FROM apply_lag "
        "GROUP BY source_zone, target_zone ORDER BY 1, 2"
    )
    return [(s, t, int(ev), float(sec), float(age), float(age) > STALE_AFTER_S) for s, t, ev, sec, age in rows]
