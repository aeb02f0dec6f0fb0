"""A relay between the broker and an applier that damages the stream on purpose.

It consumes the replicators' topics and re-produces every message, in order,
to a twin topic the applier reads, except for the faults it was told to
inject once each: drop the n-th message, duplicate it, or swap it with the next.
"""

from __future__ import annotations

import threading

from confluent_kafka import Consumer, Producer, TopicPartition


class FaultRelay:
    def __init__(self, bootstrap, sources: dict[str, str], partitions: int, faults: dict[int, str]):
        """sources: source topic -> relay topic; faults: message number (1-based, per relay) -> kind."""
        self.bootstrap = bootstrap
        self.sources = sources
        self.partitions = partitions
        self.faults = dict(faults)
        self.count = 0
        self.injected: list[tuple[str, int]] = []
        self.blackholed: set[bytes] = set()
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
                    producer.produce(out, key=m.key(), value=m.value(), partition=m.partition())

                if msg.value() in self.blackholed:
                    continue
                if kind == "drop_always":
                    self.blackholed.add(msg.value().replace(b'"is_retry":false', b'"is_retry":true'))
                    self.blackholed.add(msg.value().replace(b'"is_retry":true', b'"is_retry":false'))
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
