"""A thread between the broker and an applier that copies change messages from source
topics to twin topics, changing the stream on the way: the base of the tests' relays
(FaultRelay, TailRelay, the transaction-integrity test's HoldingRelay).

The loop is here: a consumer assigned from offset 0, one producer, each message handed to
`_relay(msg, producer)` and the producer flushed after it, until `stop()`. A subclass says
which partitions it reads (`_assignment`) and what it does with a message."""

from __future__ import annotations

import threading

from confluent_kafka import Consumer, Producer, TopicPartition


class Relay:
    name = "relay"

    def __init__(self, bootstrap):
        """bootstrap: a function returning the broker's bootstrap address (it may move)."""
        self.bootstrap = bootstrap
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is None:
            return  # never started
        self._thread.join(10)
        assert not self._thread.is_alive(), f"the {self.name} did not stop"

    def _assignment(self) -> list[TopicPartition]:
        raise NotImplementedError

    def _relay(self, msg, producer: Producer) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap(),
                "group.id": self.name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign(self._assignment())
        producer = Producer({"bootstrap.servers": self.bootstrap(), "linger.ms": 0})
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.05)
                if msg is None or msg.error():
                    continue
                self._relay(msg, producer)
                producer.flush(5)
        finally:
            producer.flush(5)
            consumer.close()
