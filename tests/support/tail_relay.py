"""A twin of a change topic that lost its head to retention, for an applier to read.

The dev broker cannot delete a partition's head on request (no DeleteRecords), and its
own size limit (~5 MiB per partition) would drop resent events as well. TailRelay
copies a topic to a twin topic partition by partition, in order, leaving out every
message before `keep_from[partition]`: the twin holds only the tail, as a topic whose
retention deleted the rest. It keeps copying what arrives later (new writes, resends),
so a replicator's resend reaches the applier reading the twin.

A partition whose head is kept (keep_from 0) has the same offsets in the twin; a
partition that lost its head starts its twin at offset 0, so an applier's recorded
offset lies past the twin's end (the broker answers out of range and the consumer
starts at the oldest message left) or inside the tail: either way what it reads first
is not the successor of what it applied.
"""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from tests.support.relay import Relay
from zonesync.events import ChangeEvent, decode_message


class TailRelay(Relay):
    name = "tail-relay"

    def __init__(
        self, bootstrap, source: str, twin: str, partitions: int, keep_from: dict[int, int], hold_resend: float = 0.0
    ):
        """hold_resend: the first message of resent events (is_retry) waits that long before it
        and everything after it is passed on, as if a long tail lay before it in the topic."""
        super().__init__(bootstrap)
        self.hold_resend = hold_resend
        self.resend_seen: float | None = None  # monotonic time the first resent event was read
        self.source = source
        self.twin = twin
        self.partitions = partitions
        self.keep_from = {p: keep_from.get(p, 0) for p in range(partitions)}
        self.copied = [0] * partitions  # messages passed on, per partition
        self.next_offset = [0] * partitions  # the next source offset expected, per partition
        self.lost: list[tuple[int, int, ChangeEvent]] = []  # (partition, source offset, event) left out

    def caught_up(self, ends: dict[int, int]) -> bool:
        """Has every partition been relayed up to (not including) its source offset `ends[p]`?"""
        return all(self.next_offset[p] >= end for p, end in ends.items())

    def _assignment(self) -> list[TopicPartition]:
        return [TopicPartition(self.source, p, 0) for p in range(self.partitions)]

    def _relay(self, msg, producer) -> None:
        p, offset = msg.partition(), msg.offset()
        events = decode_message(msg.value())
        if offset < self.keep_from[p]:
            self.lost += [(p, offset, e) for e in events]
        else:
            if self.resend_seen is None and any(e.is_retry for e in events):
                self.resend_seen = time.monotonic()
                self._stop.wait(self.hold_resend)
            producer.produce(self.twin, value=msg.value(), partition=p)
            producer.flush(5)
            self.copied[p] += 1
        self.next_offset[p] = offset + 1  # (once it is in the twin)
