"""Where a zone's capture starts, and why it never silently starts over (seed S001-09).

Pegasus writes `duplicating=true` into a replica's init_info so that a replica that
restarts without its progress never skips a log. Here the same promise is the
`capture_starts` row in meta, written in the same transaction as the zone's first
checkpoint and never pruned with the checkpoint history:

- No checkpoint and no capture_starts row: the zone was never captured. The first
  replicator starts at the binlog's current end (nothing before that moment is
  anyone's change to replicate: the zones were loaded before replication existed),
  and records it.
- A checkpoint: resume from it.
- A capture_starts row but no checkpoint: the history was lost (rows deleted, meta
  restored from an old backup). Starting at the binlog end would skip every change
  since the lost checkpoint without a trace, so the replicator refuses, naming the
  zone, and raises a `no_checkpoint` alert. The operator restores the checkpoint, or
  sets a new start with `zonesync binlog bootstrap --zone Z --at FILE:POS|current`;
  the consumers then see a new chain (prev_lsn 0) that their applied LSNs do not
  continue, and halt until they are rebuilt or resumed deliberately.
"""

from __future__ import annotations

from zonesync.capture import segments
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.config import ConfigError
from zonesync.meta.db import MetaConfig


class NoCheckpoint(ConfigError):
    """The zone was captured before, but its checkpoint history is gone."""


class BootstrapRefused(ConfigError):
    pass


def recorded_start(meta: MetaConfig, zone: str) -> tuple[str, int, str, object] | None:
    """(log_file, log_pos, started_by, started_at) of the zone's capture start."""
    rows, _ = meta.run("SELECT log_file, log_pos, started_by, started_at FROM capture_starts WHERE zone = %s", (zone,))
    return (rows[0][0], int(rows[0][1]), rows[0][2], rows[0][3]) if rows else None


def start_checkpoint(store: CheckpointStore, meta: MetaConfig, zone: str, binlog_end, lease=None) -> Checkpoint:
    """The checkpoint a pass starts from; `binlog_end()` gives (file, pos) on a first start."""
    cp = store.latest()
    if cp is not None:
        return cp
    started = recorded_start(meta, zone)
    if started is not None:
        raise NoCheckpoint(
            f"zone {zone} has been captured since {started[0]}:{started[1]} ({started[2]}, {started[3]}) but meta "
            f"holds no checkpoint for it: starting at the binlog end would skip every change since the lost "
            f"checkpoint. Restore the replicator_checkpoints rows of zone {zone}, or set a new start with "
            f"`zonesync binlog bootstrap --zone {zone} --at FILE:POS` (its consumers will need a rebuild)"
        )
    log_file, log_pos = binlog_end()
    bootstrap(meta, zone, log_file, log_pos, "first start", lease=lease)
    cp = store.latest()
    assert cp is not None
    return cp


def bootstrap(meta: MetaConfig, zone: str, log_file: str, log_pos: int, by: str, lease=None) -> Checkpoint:
    """Set the zone's capture start: the chain's first checkpoint (LSN 0) and the
    capture_starts row, in one meta transaction. Refused while the zone has checkpoints:
    moving an existing chain's start would make the same binlog position produce
    another prev_lsn chain than the one consumers are following."""
    with meta.transaction() as cur:
        if lease is not None:
            lease.renew(cur)
        # the chain starts on the zone's primary now (segments.py: after a failover, the
        # newest segment); its GTID state there is asked by the first pass
        seg = segments.current(meta, zone, cur=cur)
        floor, number = (seg.lsn_floor, seg.segment) if seg else (0, 0)
        cp = Checkpoint(zone, floor, log_file, int(log_pos), {}, 0, segment=number)
        cur.execute("SELECT lsn FROM replicator_checkpoints WHERE zone = %s LIMIT 1 FOR UPDATE", (zone,))
        if cur.fetchone() is not None:
            raise BootstrapRefused(
                f"zone {zone} already has checkpoints: its capture resumes from them; bootstrap is only for a "
                "zone never captured or whose checkpoint history was lost"
            )
        cur.execute(
            "REPLACE INTO capture_starts (zone, log_file, log_pos, started_by) VALUES (%s, %s, %s, %s)",
            (zone, log_file, int(log_pos), by[:255]),
        )
        cur.execute(
            "INSERT INTO replicator_checkpoints (zone, lsn, log_file, log_pos, partition_lsns, published_hwm, "
            "partition_counts, segment) VALUES (%s, %s, %s, %s, '{}', 0, '{}', %s)",
            (zone, cp.lsn, log_file, int(log_pos), cp.segment),
        )
    return cp


class SkipRefused(ConfigError):
    pass


def skip_lost(meta: MetaConfig, zone: str, source_conn, reason: str, by: str) -> tuple[Checkpoint, Checkpoint]:
    """Seed S000-53's cure, the operator's decision: the binlog file holding the zone's
    newest checkpoint is gone (purged, expired), so its replicator publishes nothing and
    keeps asking. Move that checkpoint to the binlog's current end, with the LSNs it had:
    the replicator reads on from there, and its consumers see the chain go on. What the
    zone wrote in between reaches no consumer: each needs a repair copy from this zone
    (docs/copy.md), which reads the zone's rows as they are after the move. Refused while
    the file is still on the server (nothing was lost: the replicator reads on from it).
    Returns (the checkpoint before, after); an alert `binlog_skipped` says what was done."""
    from dataclasses import replace

    from zonesync.capture.binlog import binlog_end
    from zonesync.meta import alerts

    store = CheckpointStore(meta, zone)
    try:
        cp = store.latest()
        if cp is None:
            raise SkipRefused(f"zone {zone} has no checkpoint: set where its capture starts with `zonesync binlog "
                              f"bootstrap --zone {zone} --at FILE:POS|current`")  # fmt: skip
        with source_conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [row[0] for row in cur.fetchall()]
        if cp.log_file in files:
            raise SkipRefused(
                f"zone {zone}'s checkpoint file {cp.log_file} is still on the server: nothing was lost, the "
                "replicator reads on from it"
            )
        end = binlog_end(source_conn)
        moved = replace(cp, log_file=end[0], log_pos=int(end[1]), gtid_pos=None)  # (the next pass asks it)
        store.save(moved)
    finally:
        store.close()
    alerts.record(
        meta,
        zone,
        "binlog_skipped",
        {"from": f"{cp.log_file}:{cp.log_pos}", "to": f"{moved.log_file}:{moved.log_pos}", "lsn": cp.lsn,
         "reason": reason[:300], "by": by[:128],
         "action": f"repair every other zone with a full copy from {zone} (zonesync copy --from {zone} --to Z "
                   "--mode repair)"},
    )  # fmt: skip
    return cp, moved
