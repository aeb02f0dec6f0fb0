"""meta's lag_samples: each applier's lag per source zone over time, for the console's
lag chart (console/lag.py reads it).

Each applier adds its lag here as it reports it to apply_lag (once a second): per source
zone one row per 10 s bucket holding the largest figures seen in it, so an hour of one
zone pair is 360 rows and a day of six pairs about 52k. The applier that writes a pair's
rows also prunes them past KEEP_S, by the primary key, a bounded batch at a time.
"""

from __future__ import annotations

BUCKET_S = 10
KEEP_S = 7 * 86400
PRUNE_EVERY_S = 600
PRUNE_BATCH = 5000


def bucket_of(at: float) -> int:
    return int(at) // BUCKET_S * BUCKET_S


def samples(rows: list[tuple], at: float) -> list[tuple[str, str, int, int, float]]:
    """An applier's report rows (source, target, partition, applied LSN, events behind,
    seconds behind) as one sample per zone pair: events summed over the partitions,
    seconds the largest (as `zonesync lag` adds them up)."""
    pairs: dict[tuple[str, str], list] = {}
    for source, target, _partition, _lsn, events, seconds in rows:
        got = pairs.setdefault((source, target), [0, 0.0])
        got[0] += int(events)
        got[1] = max(got[1], float(seconds))
    return [(s, t, bucket_of(at), ev, sec) for (s, t), (ev, sec) in sorted(pairs.items())]


def write(cur, sampled: list[tuple[str, str, int, int, float]]) -> None:
    """The bucket keeps the largest figures reported in it."""
    cur.executemany(
        "INSERT INTO lag_samples (source_zone, target_zone, bucket, behind_events, behind_seconds) "
        "VALUES (%s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
        "behind_events = GREATEST(behind_events, VALUES(behind_events)), "
        "behind_seconds = GREATEST(behind_seconds, VALUES(behind_seconds))",
        sampled,
    )


def prune(cur, pairs: set[tuple[str, str]], at: float) -> int:
    """Samples of these pairs older than KEEP_S, a bounded batch per pair."""
    gone = 0
    for source, target in sorted(pairs):
        cur.execute(
            "DELETE FROM lag_samples WHERE source_zone = %s AND target_zone = %s AND bucket < %s "
            f"ORDER BY bucket LIMIT {PRUNE_BATCH}",
            (source, target, bucket_of(at - KEEP_S)),
        )
        gone += cur.rowcount
    return gone


def read(cur, source: str, target: str, since: int) -> list[list]:
    """One pair's samples from bucket `since` on, oldest first: [[bucket, events, seconds]]
    (a range of the primary key)."""
    cur.execute(
        "SELECT bucket, behind_events, behind_seconds FROM lag_samples WHERE source_zone = %s "
        "AND target_zone = %s AND bucket >= %s ORDER BY bucket",
        (source, target, since),
    )
    return [[int(b), int(e), float(s)] for b, e, s in cur.fetchall()]
