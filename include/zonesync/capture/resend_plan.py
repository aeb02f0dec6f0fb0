"""Step 6 of the replicator (replicator.py): where a pass starts when appliers asked for resends.

An applier that found a gap in a partition writes a request row in meta (the
partition and the LSN after which it needs events again). At the start of a pass
the replicator looks for the newest checkpoint that re-reads that partition from
that LSN, and rewinds to the oldest of those for all pending requests; events up
to the highest high-water mark among them go out again with is_retry, for the
asked partitions only.

A request that no checkpoint can serve, or whose checkpoint lies in a binlog file
already purged or on a former primary of the zone (docs/failover.md), fails at once
("needs full copy"): rewinding into a purged file would stop this zone's capture for every partition, retried for ever.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.meta import resends
from zonesync.meta.db import MetaConfig


@dataclass
class ResendPlan:
    start: Checkpoint  # where the pass reads from
    request_ids: list[int] = field(default_factory=list)  # the requests this pass serves
    partitions: set[int] | None = None  # the partitions re-published (None: no resend)
    until: int = 0  # re-publish with is_retry up to this LSN


def plan(meta: MetaConfig, zone: str, store: CheckpointStore, binlog_files, cp: Checkpoint) -> ResendPlan:
    """The pass's start: `cp` (the latest checkpoint) unless pending requests rewind it;
    `binlog_files()` lists the files the zone still holds (asked only when a request is pending)."""
    requests = resends.pending(meta, zone)
    out = ResendPlan(start=cp, until=cp.published_hwm)
    if not requests:
        return out
    starts, held_files = [], binlog_files()
    for rid, part, from_lsn in requests:
        found = store.for_resend(part, from_lsn)
        if found is None or found.segment != cp.segment or found.log_file not in held_files:
            if found is None:
                why = f"no checkpoint re-reads LSN {from_lsn}"
            elif found.segment != cp.segment:  # (segments.py: its binlog is a former primary's)
                why = f"LSN {from_lsn} was read on a former primary of the zone (segment {found.segment})"
            else:
                why = f"binlog {found.log_file}, which re-reads LSN {from_lsn}, was purged"
            why = f"{why}: needs full copy"
            resends.finish(meta, [rid], "failed", why)
            continue
        starts.append(found)
        out.request_ids.append(rid)
    if starts:
        # only the served requests' partitions: a failed one's partition is halted for a
        # full copy, and re-publishing it would only send its applier duplicates
        out.partitions = {p for rid, p, _ in requests if rid in out.request_ids}
        out.until = max(cp.published_hwm, max(c.published_hwm for c in starts))
        out.start = min(starts, key=lambda c: c.lsn)
    return out
