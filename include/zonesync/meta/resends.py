"""Resend requests: an applier that found a gap in a partition's LSN chain asks the source
zone's replicator, through meta, to publish that partition again from an LSN."""

from __future__ import annotations

from zonesync.meta.db import MetaConfig


def pending(meta: MetaConfig, source_zone: str) -> list[tuple[int, int, int]]:
    """(request id, partition, from LSN) of the zone's open requests, oldest first."""
    rows, _ = meta.run(
        "SELECT id, partition_no, from_lsn FROM resend_requests WHERE source_zone = %s "
        "AND status = 'pending' ORDER BY id",
        (source_zone,),
    )
    return [(int(a), int(b), int(c)) for a, b, c in rows]


def finish(meta: MetaConfig, ids: list[int], status: str, detail: str) -> None:
    """Close requests as 'done' or 'failed', saying why; the applier reads it back."""
    if ids:
        meta.run(
            f"UPDATE resend_requests SET status = %s, detail = %s, done_at = NOW(6) "
            f"WHERE id IN ({', '.join(['%s'] * len(ids))})",
            (status, detail[:500], *ids),
        )
