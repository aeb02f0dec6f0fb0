"""Changing the change topics' partition count (seed S002-08, 危险操作): a guarded, re-runnable
procedure that restarts every zone's chains at a recorded epoch.

A key's partition is crc32(table, pk) mod the count, and each partition carries its own
prev_lsn chain and apply position. Changed under live chains, a key's next change would
land in another partition and could overtake the one before it, and the appliers would
see gaps that are none. So the count changes only when nothing is in flight:

1. Refused while a worker runs: a replicator holding its zone's lease, or an applier
   that reported lag within the last few seconds.
2. Refused unless drained: for every zone with a checkpoint, every other zone has applied
   its events up to that checkpoint in every partition (the seed's "在确保 binlog
   已经完成复制的情况下"). Events published past the last checkpoint are read again
   below, into the new chains, and the version guard makes them no-ops where applied.
3. Each zone's checkpoints are replaced by one at the last checkpoint's binlog position
   with no partition LSNs and no counts: the chains restart there, prev_lsn 0 in every
   partition. (Old checkpoints go: a resend must never rewind into the old numbering.)
4. Every zone's apply_state is emptied: positions restart at LSN 0, offset -1.
5. change_topics records the new count and the next epoch for every zone.

Each step only moves towards the end state, so a run cut off half-way (a zone down) is
completed by running it again: after step 3 the drain check holds trivially, and workers
refuse to start (another partition count) until step 5 is done. Re-creating the topics
with the new count is the deployment's (in development the broker keeps topics in memory:
restart it), as is setting ZONESYNC_KAFKA_PARTITIONS.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.apply.tools.progress import STALE_AFTER_S, applied_lsns, covers
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.meta.db import MetaConfig


class RepartitionRefused(RuntimeError):
    """Nothing was changed: the message says what to do first."""


@dataclass
class Repartitioned:
    partitions: int
    epoch: int
    restarted: dict[str, tuple[str, int]]  # zone -> the binlog position its new chain starts at


def check_idle(meta: MetaConfig) -> None:
    """Step 1: no replicator holds a lease, no applier reported lag lately."""
    leases, _ = meta.run("SELECT zone, holder FROM replicator_leases WHERE expires_at > NOW(6) ORDER BY zone")
    appliers, _ = meta.run(
        "SELECT DISTINCT target_zone FROM apply_lag WHERE updated_at > NOW(6) - INTERVAL %s SECOND ORDER BY 1",
        (STALE_AFTER_S,),
    )
    running = [f"zone {z}'s replicator ({holder})" for z, holder in leases]
    running += [f"zone {z}'s applier" for (z,) in appliers]
    if running:
        raise RepartitionRefused(f"workers are running: {', '.join(running)}: stop every replicator and applier first")


def check_drained(meta: MetaConfig, zones: list[str], connect) -> dict[str, Checkpoint]:
    """Step 2: every zone's latest checkpoint, once every other zone applied up to it."""
    latest: dict[str, Checkpoint] = {}
    for zone in zones:
        store = CheckpointStore(meta, zone)
        try:
            cp = store.latest()
        finally:
            store.close()
        if cp is not None:
            latest[zone] = cp
    behind = []
    for source, cp in latest.items():
        for target in zones:
            if target == source:
                continue
            conn = connect(target)
            try:
                applied = applied_lsns(conn, source)
            finally:
                conn.close()
            if not covers(applied, cp.partition_lsns):
                short = sorted(p for p, lsn in cp.partition_lsns.items() if applied.get(p, 0) < lsn)
                behind.append(f"zone {target} has not applied zone {source}'s events up to its checkpoint "
                              f"(partitions {short})")  # fmt: skip
    if behind:
        raise RepartitionRefused(
            "; ".join(behind) + ": start those appliers, let `zonesync lag` reach 0, stop them, and run this again"
        )
    return latest


def restart_chains(meta: MetaConfig, latest: dict[str, Checkpoint]) -> dict[str, tuple[str, int]]:
    """Step 3: each zone's chain restarts at its last checkpoint's position: that checkpoint
    loses its partition LSNs, counts and high-water mark, and every other one goes, in one
    meta transaction per zone (a zone is never left without a checkpoint)."""
    restarted = {}
    conn = meta.connect(autocommit=False)
    try:
        for zone, cp in latest.items():
            with conn.cursor() as cur:
                cur.execute(
                    "UPDATE replicator_checkpoints SET partition_lsns = '{}', partition_counts = '{}', "
                    "published_hwm = 0 WHERE zone = %s AND lsn = %s",
                    (zone, cp.lsn),
                )
                cur.execute("DELETE FROM replicator_checkpoints WHERE zone = %s AND lsn <> %s", (zone, cp.lsn))
            conn.commit()
            restarted[zone] = (cp.log_file, cp.log_pos)
    finally:
        conn.close()
    return restarted


def reset_positions(zones: list[str], connect) -> None:
    """Step 4: every zone's apply positions start over (tombstones and locks stay)."""
    for zone in zones:
        conn = connect(zone)
        try:
            with conn.cursor() as cur:
                cur.execute("DELETE FROM zonesync.apply_state")
            conn.commit()
        finally:
            conn.close()


def record_epoch(meta: MetaConfig, zones: list[str], partitions: int) -> int:
    """Step 5: the new count and the next epoch, for every zone (one transaction)."""
    rows, _ = meta.run("SELECT COALESCE(MAX(epoch), 0) FROM change_topics")
    epoch = int(rows[0][0]) + 1
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO change_topics (zone, partitions, epoch, repartitioned_at) VALUES (%s, %s, %s, NOW(6)) "
                "ON DUPLICATE KEY UPDATE partitions = VALUES(partitions), epoch = VALUES(epoch), "
                "repartitioned_at = VALUES(repartitioned_at)",
                [(z, partitions, epoch) for z in zones],
            )
        conn.commit()
    finally:
        conn.close()
    return epoch


def repartition(meta: MetaConfig, zones: list[str], connect, partitions: int) -> Repartitioned:
    """Steps 1-5; RepartitionRefused (nothing changed) when a worker runs or a zone is behind."""
    if partitions < 1:
        raise RepartitionRefused(f"--partitions {partitions}: give a positive count, e.g. 32")
    check_idle(meta)
    latest = check_drained(meta, zones, connect)
    restarted = restart_chains(meta, latest)
    reset_positions(zones, connect)
    epoch = record_epoch(meta, zones, partitions)
    return Repartitioned(partitions, epoch, restarted)
