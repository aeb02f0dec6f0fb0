"""A relay between the broker and an applier that damages the stream on purpose.

It consumes the replicators' topics and re-produces every message, in order,
to a twin topic the applier reads, except for the faults it was told to
inject once each: drop the n-th message, duplicate it, or swap it with the next.
`drop_always` drops the n-th message's events for good: in every later message
too (a resend groups events as it reads them, so it is matched by LSN).
"""

from __future__ import annotations

import threading

from confluent_kafka import Consumer, Producer, TopicPartition

from zonesync.events import decode_message, encode_message


class FaultRelay:
    def __init__(self, bootstrap, sources: dict[str, str], partitions: int, faults: dict[int, str]):
        """sources: source topic -> relay topic; faults: message number (1-based, per relay) -> kind."""
        self.bootstrap = bootstrap
        self.sources = sources
        self.partitions = partitions
        self.faults = dict(faults)
        self.count = 0
        self.injected: list[tuple[str, int]] = []
        self.blackholed: set[int] = set()  # LSNs never passed on
        self.dropped: list = []  # the events drop_always took out of the stream
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(10)

    def _run(self):
        consumer = Consumer({"bootstrap.servers": self.bootstrap(), "group.id": "relay", "enable.auto.commit": False})
        consumer.assign([TopicPartition(t, p, 0) for t in self.sources for p in range(self.partitions)])
        producer = Producer({"bootstrap.servers": self.bootstrap(), "linger.ms": 0})
        held = None
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.05)
                if msg is None or msg.error():
                    continue
                self.count += 1
                out = self.sources[msg.topic()]
                kind = self.faults.pop(self.count, None)

                def send(m, out=out):
                    value = m.value()
                    if self.blackholed:
                        events = decode_message(value)
                        kept = [e for e in events if e.lsn not in self.blackholed]
                        if not kept:
                            return
                        if len(kept) < len(events):
                            value = encode_message(kept)
                    producer.produce(out, key=m.key(), value=value, partition=m.partition())

                if kind == "drop_always":
                    self.dropped = decode_message(msg.value())
                    self.blackholed.update(e.lsn for e in self.dropped)
                    self.injected.append((kind, self.count))
                    continue
                if held is not None:
                    send(msg)
                    send(held)  # the swapped pair goes out in reverse order
                    held = None
                elif kind == "drop":
                    self.injected.append((kind, self.count))
                elif kind == "duplicate":
                    send(msg)
                    send(msg)
                    self.injected.append((kind, self.count))
                elif kind == "reorder":
                    held = msg
                    self.injected.append((kind, self.count))
                else:
                    send(msg)
                producer.flush(5)
        finally:
            consumer.close()
