"""Is a zone's tag store fresh: has its tagger tagged every change written up to a moment?

S004-06: a migration's stock scan starts only once every row written before its start is
tagged, or a row inserted just before would be left behind. "Up to now" is each zone's
binlog position P, read now. As the zone switch's wait_sync asks of appliers
(apply/tools/progress.py), the first replicator checkpoint at or past P names, per
partition, the last LSN that covers everything up to P; the store is fresh for that zone
once its tag_state has reached each of them. Never the topics' end offsets: an event in
the binlog that the replicator has not published yet is in no topic, so "tagged up to the
topics' ends" can be true while a row written before it is not tagged.
"""

from __future__ import annotations

import time

from zonesync.apply.tools.progress import covers, targets_reached
from zonesync.meta.db import MetaConfig
from zonesync.tagging.tag_store import TagStore


def tagged_lsns(store: TagStore, source_zone: str) -> dict[int, int]:
    """Partition -> the LSN the store is tagged up to, of one source zone's topic."""
    return {p: lsn for (s, p), (lsn, _) in store.positions().items() if s == source_zone}


def is_tagged(meta: MetaConfig, store: TagStore, source_zone: str, position: tuple[str, int]) -> bool:
    """Has `store` tagged every change `source_zone` wrote up to its binlog `position`?"""
    needed = targets_reached(meta, source_zone, position)
    return needed is not None and covers(tagged_lsns(store, source_zone), needed)


def wait_tagged(meta: MetaConfig, store: TagStore, positions: dict[str, tuple[str, int]], timeout: float) -> list[str]:
    """Wait until `store` is tagged up to each zone's binlog position in `positions`
    ({zone: (file, position)}); the zones it is not, at the timeout (empty: fresh)."""
    deadline = time.monotonic() + timeout
    left = sorted(positions)
    while True:
        left = [z for z in left if not is_tagged(meta, store, z, positions[z])]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)
