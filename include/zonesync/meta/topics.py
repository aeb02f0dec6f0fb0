"""The partition count of each zone's change topic, fixed for the life of its chains.

A row's partition is crc32(table, pk) mod the count (events.partition_of), and
each partition carries its own LSN chain and apply position. Run with another count,
a replicator would send a key's next change to another partition, where it could
overtake the change before it, and an applier would never read the partitions past
its count. So a worker first compares its count with the topic on the broker, then
the first replicator of a zone records the count in meta, and a replicator or an
applier configured otherwise refuses to start, saying what to do.
"""

from __future__ import annotations

import logging

import pymysql
from confluent_kafka import KafkaException

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
        f"replication state lives. Set ZONESYNC_KAFKA_PARTITIONS={recorded}, or change the count for every zone "
        f"with `zonesync topics repartition --partitions {configured}` (once every zone is drained)."
    )


class BrokerMetadataUnavailable(RuntimeError):
    """Transient: the worker's pass starts over (and never records a count unchecked)."""


def check_broker(client, topic_names: list[str], partitions: int, timeout: float = 3.0) -> None:
    """The topics as the broker has them (a producer's or consumer's metadata, read once).

    A topic made with another count (by hand, or before the default changed: compose's
    kafka-init never re-creates an existing topic) is the same mistake, and the broker
    is the one place that knows; it is asked before meta, so a count is never recorded
    from a wrong setting. All topics are listed: asking a producer for one topic by name
    may create it. A broker that does not answer fails the pass (workers retry); a topic
    it does not have is left to the produce and consume paths, which report it.
    """
    try:
        known = client.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise BrokerMetadataUnavailable(f"the broker did not describe its topics: {exc}") from None
    for topic in topic_names:
        found = known.get(topic)
        if found is None or found.error is not None:
            continue
        if len(found.partitions) != partitions:
            raise PartitionCountMismatch(
                f"topic {topic} has {len(found.partitions)} partitions on the broker, but ZONESYNC_KAFKA_PARTITIONS "
                f"is {partitions}: set ZONESYNC_KAFKA_PARTITIONS={len(found.partitions)} (a key's partition "
                "depends on the count, so a topic cannot be re-partitioned under a live replication chain)."
            )


def _meta_run(meta: MetaConfig, sql: str, args) -> list[tuple]:
    try:
        return meta.run(sql, args)[0]
    except pymysql.err.ProgrammingError as exc:
        if exc.args and exc.args[0] == 1146:  # no such table: a meta store from before schema 5
            raise ConfigError(
                f"meta store {meta.describe()} has no table change_topics: run `zonesync meta migrate`"
            ) from None
        raise


def claim(meta: MetaConfig, zone: str, partitions: int, chain_partitions: list[int]) -> None:
    """A replicator: record the count on first start, else insist on the recorded one.

    `chain_partitions` are the partitions of the latest checkpoint's chain. A chain older
    than this record (meta schema 5) is checked as far as it can be: a partition at or
    past the count proves the count shrank; a larger count cannot be told apart from
    partitions that had no event yet, so it is recorded with a warning.
    """
    select = "SELECT partitions FROM change_topics WHERE zone = %s"
    rows = _meta_run(meta, select, (zone,))
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
        _meta_run(meta, "INSERT IGNORE INTO change_topics (zone, partitions) VALUES (%s, %s)", (zone, partitions))
        rows = _meta_run(meta, select, (zone,))  # another replicator may have recorded it first
    if int(rows[0][0]) != partitions:
        raise _mismatch(zone, int(rows[0][0]), partitions)


def check(meta: MetaConfig, zones: list[str], partitions: int) -> None:
    """An applier: every source zone that has published must have this count."""
    if not zones:
        return
    rows = _meta_run(
        meta,
        f"SELECT zone, partitions FROM change_topics WHERE zone IN ({', '.join(['%s'] * len(zones))})",
        tuple(zones),
    )
    for zone, recorded in rows:
        if int(recorded) != partitions:
            raise _mismatch(zone, int(recorded), partitions)
