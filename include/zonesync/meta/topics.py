"""The partition count of each zone's change topic, fixed for the life of its chains.

A row's partition is crc32(table, pk) mod the count (transport.partition_of), and
each partition carries its own LSN chain and apply position. Run with another count,
a replicator would send a key's next change to another partition, where it could
overtake the change before it, and an applier would never read the partitions past
its count. So the first replicator of a zone records its count, and a replicator or
an applier configured otherwise refuses to start, saying what to do.
"""

from __future__ import annotations

import logging

from zonesync.config import ConfigError
from zonesync.meta.db import MetaConfig

log = logging.getLogger("zonesync.topics")


class PartitionCountMismatch(ConfigError):
    """Configuration, not a transient fault: workers stop instead of retrying."""


def _mismatch(zone: str, recorded: int, configured: int, at_least: bool = False) -> PartitionCountMismatch:
    count = f"at least {recorded}" if at_least else str(recorded)
    return PartitionCountMismatch(
        f"zone {zone}'s change topic was published with {count} partitions, but ZONESYNC_KAFKA_PARTITIONS "
        f"is {configured}: a key's partition depends on the count, so it cannot change while zone {zone}'s "
        f"replication state lives. Set ZONESYNC_KAFKA_PARTITIONS={recorded}, or start replication over "
        "(in a dev environment: `make clean`)."
    )


def claim(meta: MetaConfig, zone: str, partitions: int, chain_partitions: list[int]) -> None:
    """A replicator: record the count on first start, else insist on the recorded one.

    `chain_partitions` are the partitions of the latest checkpoint's chain. A chain older
    than this record (meta schema 5) is checked as far as it can be: a partition at or
    past the count proves the count shrank; a larger count cannot be told apart from
    partitions that had no event yet, so it is recorded with a warning.
    """
    rows, _ = meta.run("SELECT partitions FROM change_topics WHERE zone = %s", (zone,))
    if not rows:
        beyond = [p for p in chain_partitions if p >= partitions]
        if beyond:
            raise _mismatch(zone, max(beyond) + 1, partitions, at_least=True)
        if chain_partitions:
            log.warning(
                "zone %s: its replication chain predates the recorded partition count; recording %s "
                "(partitions used so far: up to %s)",
                zone,
                partitions,
                max(chain_partitions),
            )
        meta.run("INSERT IGNORE INTO change_topics (zone, partitions) VALUES (%s, %s)", (zone, partitions))
    check(meta, [zone], partitions)


def check(meta: MetaConfig, zones: list[str], partitions: int) -> None:
    """An applier: every source zone that has published must have this count."""
    if not zones:
        return
    rows, _ = meta.run(
        f"SELECT zone, partitions FROM change_topics WHERE zone IN ({', '.join(['%s'] * len(zones))})", tuple(zones)
    )
    for zone, recorded in rows:
        if int(recorded) != partitions:
            raise _mismatch(zone, int(recorded), partitions)
