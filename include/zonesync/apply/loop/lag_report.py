"""Step 5 of the applier (applier.py): lag per (source zone, partition), to meta.

Every second each partition's events and seconds behind go to meta's apply_lag, for
`zonesync lag` and `wait_applied`. The figures come from what the applier already
knows, with no broker round trip: the high watermark of the last fetch (the consumer's
cache) and the messages it has read; while meta is down they are dropped, not queued
(the next second's figures replace them). The loop reports after a round; the ages of
the events pending are also taken just before that round is handed out, when its own
events were pending, and the larger figure counts: a round that takes up a backlog in
one go still shows what it caught up with.

Events behind: Kafka counts messages (high watermark - applied offset); a message holds
one event or a burst of them, so the events behind are that times the events of the last
message read from the partition.

Seconds behind is the age of the oldest event not yet applied, 0 when nothing is
pending (issue 17). It is never the time since the last applied event: that was MySQL's
old Seconds_Behind_Master mistake, by which a partition idle for an hour that receives
one event reports an hour behind (and raised `lag_warning`) for the 15 ms the event
takes. Per partition a `Backlog` keeps:

- every message read (taken into a round) and not yet applied: its last LSN is above
  the LSN the target committed (a transaction's rows waiting for their end, events
  dropped after a gap, rounds not committed yet; not duplicates or replays of applied
  events), with its timestamp: the message's Kafka timestamp (the producer's clock when
  the replicator sent it, after the commit), or, if it has none, its first event's
  commit time (whole seconds from the binlog: up to a second too old);
- the first offset not read yet (a message the consumer delivered past a round's
  budget is read with the next round), and when each high watermark above it was
  first seen.

The figure is the age of the oldest pending message read, or of the first message not
read yet if that is older. The age of a message not read yet is unknown without a
fetch; the estimate is the time since a high watermark above its offset was first seen:
the broker held the message then, so it is at least that old, however long the
partition had been idle before. Both are lower bounds of the age of the oldest event
not applied (clocks of the hosts and the commit-time fallback apart), so an idle
partition that gets a burst never reports more than the burst's age; and the figure
still grows in a real backlog: the first unread offset stays below the watermarks seen
since the backlog began and moves on only as messages are read, whose timestamps are
then known. The watermark estimate may be late by up to a report (the watermark is read
once a second) and starts from 0 when the applier starts or restarts its pass (what
happened before is not known). The capture side's lag, commits not yet published, is
reported separately (capture/lag.py).

WARNING (seed S003-33's first exception instruction): a partition more than
`lag_warning_s` seconds behind raises one `lag_warning` alert, and nothing else:
apply goes on. It is raised again only after the partition came back under half
the threshold (one alert per episode, not one per second).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, TopicPartition

from zonesync.meta import lag_samples

if TYPE_CHECKING:
    from zonesync.apply.loop.settings import ApplierSettings
    from zonesync.meta.db import MetaConfig
    from zonesync.meta.outage import MetaOutage


def seconds_behind(
    now: float,
    applied_lsn: int,
    read: Iterable[tuple[int, float]],
    next_offset: int,
    high: int,
    seen: Iterable[tuple[int, float]],
) -> float:
    """The age at `now` of the oldest event not yet applied, as far as it is known.

    `read`: (last LSN, timestamp) of each message read; those whose last LSN is above
    `applied_lsn` hold an event not yet applied and are pending. `next_offset`: the first
    offset not read yet; `high`: the partition's high watermark, so messages
    `next_offset` .. `high` - 1 exist that were not read. `seen`: (high watermark, time
    it was first seen); one above `next_offset` proves the first unread message existed
    at that time. 0.0 when nothing is pending; never negative.
    """
    oldest = _oldest(applied_lsn, read)
    if high > next_offset:
        since = min((t for h, t in seen if h > next_offset), default=None)
        if since is not None and (oldest is None or since < oldest):
            oldest = since
    return 0.0 if oldest is None else max(0.0, now - oldest)


def _oldest(applied_lsn: int, read: Iterable[tuple[int, float]]) -> float | None:
    return min((ts for lsn, ts in read if lsn > applied_lsn), default=None)


class Backlog:
    """One partition's pending messages, as the applier knows them (module docstring)."""

    __slots__ = ("applied_lsn", "next_offset", "read", "seen")

    def __init__(self, applied_lsn: int, next_offset: int):
        self.applied_lsn = applied_lsn  # the last LSN committed in the target
        self.next_offset = next_offset  # the first offset not read yet
        self.read: deque[tuple[int, float]] = deque()  # (last LSN, timestamp) per message read, not applied
        self.seen: deque[tuple[int, float]] = deque()  # (high watermark, first seen) above next_offset

    def on_read(self, offset: int, last_lsn: int, timestamp: float) -> None:
        if last_lsn > self.applied_lsn:
            self.read.append((last_lsn, timestamp))
        if offset >= self.next_offset:
            self.next_offset = offset + 1

    def on_commit(self, lsn: int) -> None:
        if lsn > self.applied_lsn:
            self.applied_lsn = lsn
        read = self.read
        while read and read[0][0] <= self.applied_lsn:
            read.popleft()

    def observe(self, high: int, now: float) -> None:
        """The high watermark of the last fetch, read at `now`: first sightings are kept
        while messages below them are not read."""
        seen = self.seen
        if high > self.next_offset and (not seen or high > seen[-1][0]):
            seen.append((high, now))
        while seen and seen[0][0] <= self.next_offset:
            seen.popleft()  # every message below it has been read

    def seconds(self, now: float, high: int) -> float:
        return seconds_behind(now, self.applied_lsn, self.read, self.next_offset, high, self.seen)

    def read_age(self, now: float) -> float:
        """The age of the oldest pending message read (0.0 when none is)."""
        oldest = _oldest(self.applied_lsn, self.read) if self.read else None
        return 0.0 if oldest is None else max(0.0, now - oldest)


def message_time(msg, first_event) -> float:
    """A message's timestamp in seconds: Kafka's, or its first event's commit time."""
    kind, ms = msg.timestamp()
    return ms / 1000.0 if kind != TIMESTAMP_NOT_AVAILABLE and ms > 0 else float(first_event.commit_ts)


class LagReporter:
    """Reporting lag: given the partitions' book (positions, backlogs, message sizes), the
    settings, the zone, how a source's topic is named, meta and its outage (figures are
    dropped while it is down) and the alert function (lag_warning)."""

    def __init__(
        self,
        book,  # partitions.PartitionBook (which imports Backlog from here)
        settings: ApplierSettings,
        zone: str,
        topic_of,
        meta: MetaConfig,
        meta_outage: MetaOutage,
        alert,
    ):
        self.book = book
        self.settings = settings
        self.zone = zone
        self.topic_of = topic_of
        self.meta = meta
        self.meta_outage = meta_outage
        self.alert = alert
        self.warned: set[tuple[str, int]] = set()  # partitions past lag_warning_s, alerted once
        self.pruned_at = 0.0  # when this applier last pruned its old lag samples

    def pending_ages(self) -> dict[tuple[str, int], float]:
        """Per partition, the age of the oldest pending message read, taken before a round
        is handed out (its messages are pending then)."""
        now = time.time()
        return {key: age for key, backlog in self.book.backlog.items() if (age := backlog.read_age(now)) > 0.0}

    def report(self, consumer, pending: dict[tuple[str, int], float] | None = None) -> None:
        rows = self.figures(consumer, pending or {})
        for source, _, partition, _, behind, seconds in rows:
            self._warn(source, partition, behind, seconds)
        if rows:
            self.meta_outage.call(self.write, rows)

    def figures(self, consumer, pending: dict[tuple[str, int], float]) -> list[tuple]:
        """(source, target, partition, applied LSN, events behind, seconds behind) per
        partition, now, or as of before the round just applied (`pending`, from
        pending_ages) where that was more: cheap, no broker round trip."""
        rows = []
        now = time.time()
        book = self.book
        offsets, per_message, backlogs = book.offsets, book.per_message, book.backlog
        for (source, partition), st in book.state.items():
            try:
                # the high watermark the last fetch brought (no broker round trip); a
                # partition nothing was fetched from yet reports a negative one: skip it
                _, high = consumer.get_watermark_offsets(TopicPartition(self.topic_of(source), partition), cached=True)
                if high < 0:
                    continue
            except Exception:  # noqa: BLE001 - lag is best effort
                continue
            # Kafka counts messages; a message holds one event or a burst of them: the
            # events behind are estimated by the size of the last message read from it
            messages = max(0, high - (offsets.get((source, partition), -1) + 1))
            behind = messages * per_message.get((source, partition), 1)
            backlog = backlogs.get((source, partition))
            seconds = pending.get((source, partition), 0.0)
            if backlog is not None:
                backlog.observe(high, now)
                seconds = max(seconds, backlog.seconds(now, high))
            rows.append((source, self.zone, partition, st.applied_lsn, behind, seconds))
        return rows

    def _warn(self, source: str, partition: int, behind: int, seconds: float) -> None:
        key = (source, partition)
        if seconds >= self.settings.lag_warning_s and key not in self.warned:
            self.warned.add(key)
            self.alert(
                "lag_warning",
                {"source": source, "partition": partition, "behind_events": behind,
                 "behind_seconds": round(seconds, 1), "threshold_s": self.settings.lag_warning_s},
            )  # fmt: skip
        elif seconds < self.settings.lag_warning_s / 2:
            self.warned.discard(key)

    def write(self, rows: list[tuple]) -> None:
        conn = self.meta.connect()
        try:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, "
                    "behind_seconds) VALUES (%s,%s,%s,%s,%s,%s) ON DUPLICATE KEY UPDATE applied_lsn = "
                    "VALUES(applied_lsn), behind_events = VALUES(behind_events), behind_seconds = "
                    "VALUES(behind_seconds), updated_at = NOW(6)",
                    rows,
                )
                # the console's lag chart: one sample per source and 10 s, pruned now and then
                at = time.time()
                lag_samples.write(cur, lag_samples.samples(rows, at))
                if at - self.pruned_at >= lag_samples.PRUNE_EVERY_S:
                    self.pruned_at = at
                    lag_samples.prune(cur, {(r[0], r[1]) for r in rows}, at)
        finally:
            conn.close()
