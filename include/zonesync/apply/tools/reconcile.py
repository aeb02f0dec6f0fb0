"""Count reconciliation (seed S002-10, 同时检查从集群与主集群的 binlog 条数是否相等).

Two counts of the same events, kept by the two ends independently:

- published: with each checkpoint the replicator saves, per partition, the number of
  events its chain has held since it began (capture/publish.py counts every event
  given a place in a chain; like the chain's LSNs it is a pure function of the binlog
  position, so a rewind for a resend recounts the same numbers).
- committed: with each batch a target commits, per (source, partition), the number
  of events of the chain the batch covers (apply_state.events), in the same
  transaction as the rows: every event the chain accepted, whether it was applied,
  skipped as older or replayed, or held by a lock. Duplicates are never counted
  (the chain skips them before anything is decided).

At a position both ends have reached (a checkpoint whose LSN for the partition is the
target's applied LSN), the two must be equal: published = applied + skipped + held.
A difference means an event was lost or taken twice between the two ends, and is
alerted. A partition the replicator has no checkpoint at yet (the target is ahead of
the last saved checkpoint, or behind by events in flight) is reported as not
comparable now, not as a difference.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.capture.checkpoints import CheckpointStore
from zonesync.meta import alerts
from zonesync.meta.db import MetaConfig

OK, MISMATCH, IN_FLIGHT, NOT_COUNTED, HALTED = "ok", "MISMATCH", "in flight", "not counted", "halted"


@dataclass(frozen=True)
class Reconciled:
    source: str
    partition: int
    applied_lsn: int
    committed: int
    published: int | None
    status: str


def reconcile(meta: MetaConfig, target_conn, sources: list[str] | None = None) -> list[Reconciled]:
    """Every (source, partition) of the target zone behind `target_conn`, compared."""
    with target_conn.cursor() as cur:
        cur.execute("SELECT source_zone, partition_no, applied_lsn, events, status FROM zonesync.apply_state")
        positions = [(s, int(p), int(lsn), int(n), st) for s, p, lsn, n, st in cur.fetchall()]
    target_conn.commit()
    out: list[Reconciled] = []
    for source in sorted({p[0] for p in positions} if sources is None else sources):
        store = CheckpointStore(meta, source)
        try:
            history = store.history()[::-1]  # newest first
        finally:
            store.close()
        for s, partition, lsn, committed, status in sorted(p for p in positions if p[0] == source):
            at = next((cp for cp in history if cp.partition_lsns.get(partition, 0) == lsn), None)
            if at is None:
                out.append(Reconciled(s, partition, lsn, committed, None, HALTED if status == "halted" else IN_FLIGHT))
            elif at.partition_counts is None:
                out.append(Reconciled(s, partition, lsn, committed, None, NOT_COUNTED))
            else:
                published = at.partition_counts.get(partition, 0)
                status = OK if published == committed else MISMATCH
                out.append(Reconciled(s, partition, lsn, committed, published, status))
    return out


def alert_differences(meta: MetaConfig, target_zone: str, rows: list[Reconciled]) -> int:
    """One `count_mismatch` alert per partition whose counts differ; how many there were."""
    wrong = [r for r in rows if r.status == MISMATCH]
    for r in wrong:
        alerts.record(
            meta,
            target_zone,
            "count_mismatch",
            {
                "source": r.source,
                "partition": r.partition,
                "applied_lsn": r.applied_lsn,
                "published": r.published,
                "committed": r.committed,
                "action": "compare the partition's rows (checksums) and rebuild what differs",
            },
        )
    return len(wrong)
