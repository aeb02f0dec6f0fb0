"""A relay between the broker and an applier that damages the stream on purpose.

It consumes the replicators' topics and re-produces every message, in order,
to a twin topic the applier reads, except for the faults it was told to
inject once each: drop the n-th message, duplicate it, or swap it with the next.
`drop_always` drops the n-th message's events for good: in every later message
too (a resend groups events as it reads them, so it is matched by LSN).
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from tests.support.relay import Relay
from zonesync.events import decode_message, encode_message


class FaultRelay(Relay):
    name = "fault-relay"

    def __init__(self, bootstrap, sources: dict[str, str], partitions: int, faults: dict[int, str]):
        """sources: source topic -> relay topic; faults: message number (1-based, per relay) -> kind."""
        super().__init__(bootstrap)
        self.sources = sources
        self.partitions = partitions
        self.faults = dict(faults)
        self.count = 0
        self.injected: list[tuple[str, int]] = []
        self.blackholed: set[int] = set()  # LSNs never passed on
        self.dropped: list = []  # the events drop_always took out of the stream
        self._held = None  # the first of a pair to swap, until the second is read

    def _assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, 0) for t in self.sources for p in range(self.partitions)]

    def _send(self, producer, msg, out: str) -> None:
        value = msg.value()
        if self.blackholed:
            events = decode_message(value)
            kept = [e for e in events if e.lsn not in self.blackholed]
            if not kept:
                return
            if len(kept) < len(events):
                value = encode_message(kept)
        producer.produce(out, key=msg.key(), value=value, partition=msg.partition())

    def _relay(self, msg, producer) -> None:
        self.count += 1
        out = self.sources[msg.topic()]
        kind = self.faults.pop(self.count, None)
        if kind == "drop_always":
            self.dropped = decode_message(msg.value())
            self.blackholed.update(e.lsn for e in self.dropped)
            self.injected.append((kind, self.count))
            return
        if self._held is not None:
            self._send(producer, msg, out)
            self._send(producer, self._held, out)  # the swapped pair goes out in reverse order
            self._held = None
        elif kind == "drop":
            self.injected.append((kind, self.count))
        elif kind == "duplicate":
            self._send(producer, msg, out)
            self._send(producer, msg, out)
            self.injected.append((kind, self.count))
        elif kind == "reorder":
            self._held = msg
            self.injected.append((kind, self.count))
        else:
            self._send(producer, msg, out)
