"""Binlog retention (Pegasus's delay GC): purge only what no consumer can need again.

A binlog file may go only when every consumer has confirmed past it. For each
target zone and partition, the file still needed is the one of the newest
checkpoint from which that partition's next unapplied event would be re-read
(the same rule a resend uses). The oldest such file over all targets and
partitions, and the replicator's own checkpoint, bound the purge. A zone whose
applier never reported holds everything: it may still need it all.
"""

from __future__ import annotations

from zonesync.capture.checkpoints import CheckpointStore
from zonesync.capture.event import file_number
from zonesync.meta.db import MetaConfig


def needed_file(meta: MetaConfig, zone: str) -> tuple[str | None, str]:
    store = CheckpointStore(meta, zone)
    try:
        history = store.history()
    finally:
        store.close()
    if not history:
        return None, f"zone {zone} has no replicator checkpoint yet: nothing may be purged"
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT name FROM zones WHERE name <> %s", (zone,))
            targets = [r[0] for r in cur.fetchall()]
            cur.execute("SELECT target_zone, partition_no, applied_lsn FROM apply_lag WHERE source_zone = %s", (zone,))
            applied: dict[tuple[str, int], int] = {(t, int(p)): int(lsn) for t, p, lsn in cur.fetchall()}
    finally:
        conn.close()
    partitions = {p for cp in history for p in cp.partition_lsns} | {p for _, p in applied}
    oldest = history[-1]
    holder = "the replicator's own checkpoint"
    for target in targets:
        for p in sorted(partitions) or [0]:
            have = applied.get((target, p), 0)
            candidates = [cp for cp in history if cp.partition_lsns.get(p, 0) <= have]
            if not candidates:
                return None, f"zone {target} partition {p} needs LSN {have}, older than every checkpoint"
            need = candidates[-1]
            if (file_number(need.log_file), need.log_pos) < (file_number(oldest.log_file), oldest.log_pos):
                oldest, holder = need, f"zone {target} partition {p} (applied LSN {have})"
    return oldest.log_file, f"oldest file still needed: {oldest.log_file}, held by {holder}"


def safe_purge(
    meta: MetaConfig, zone: str, dry_run: bool = False, source_conn=None, to_file: str | None = None
) -> tuple[str | None, str]:
    """Purge the zone's binlogs before the oldest needed file, or before `to_file` when the
    operator names one that is no later; return (file or None, why). Naming a later file
    (one whose purge would take a still-needed file with it) is refused."""
    keep, reason = needed_file(meta, zone)
    if keep is not None and to_file is not None:
        if file_number(to_file) > file_number(keep):
            return None, f"refused: purging before {to_file} would remove {keep}, still needed ({reason})"
        keep, reason = to_file, f"as asked; {reason}"
    if keep is None or dry_run:
        return (keep if dry_run else None), reason
    if source_conn is None:
        import pymysql

        from zonesync.workers import zone_endpoint

        ep = zone_endpoint(zone)
        source_conn = pymysql.connect(host=ep.host, port=ep.port, user=ep.user, password=ep.password)
    with source_conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        if keep not in files:
            return None, f"{keep} is needed but no longer on the server: consumers need a full copy"
        if files and files[0] == keep:
            return None, f"nothing to purge: {reason}"
        cur.execute(f"PURGE BINARY LOGS TO '{keep}'")
        cur.execute("SHOW BINARY LOGS")
        kept = [r[0] for r in cur.fetchall()]
    if kept and kept[0] != keep:  # the server keeps files its crash recovery or a reading replica needs
        reason += f"; the server kept {kept[0]} and later (its own crash recovery or a replica still reads them)"
    return keep, reason
