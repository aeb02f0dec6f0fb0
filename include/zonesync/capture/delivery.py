"""Step 5 of the replicator (replicator.py): which checkpoint the broker has made safe.

The replicator reads on without waiting for the broker. Each checkpoint it takes is
noted with how many messages each partition had been given by then; the broker acks
a partition's messages in the order they were produced (idempotent producer), so once
acked[p] >= noted[p] for every partition, everything up to that checkpoint is stored
and it may be saved. A checkpoint never covers events still queued: noting one first
produces every queue.

One Delivery per pass: its producer, its counts, its checkpoints in flight. Errors the
producer reports (a refused message, the broker gone) are collected and end the pass;
the next one starts from the last saved checkpoint.
"""

from __future__ import annotations

from collections import deque

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from zonesync.capture.checkpoints import Checkpoint
from zonesync.capture.faults import EventTooLarge
from zonesync.events import ChangeEvent, decode_message, encode_messages
from zonesync.runtime import transport


class DeliveryError(RuntimeError):
    pass


def last_published_lsn(bootstrap: str, topic: str, partitions: int, timeout: float = 5.0) -> int:
    """The highest LSN the topic holds: the last event of each partition's last message.
    After a restart, everything up to it may be published again (is_retry); events past
    the saved checkpoint are re-read and re-published in any case. 0 when the topic is
    empty or does not answer in time (the events then go out unmarked, as before)."""
    consumer = Consumer(transport.consumer_config(bootstrap, "zonesync-tail"))
    try:
        wanted = []
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                wanted.append(TopicPartition(topic, p, high - 1))
        if not wanted:
            return 0
        consumer.assign(wanted)
        left, top = {tp.partition for tp in wanted}, 0
        for _ in range(int(timeout / 0.1)):
            if not left:
                break
            msg = consumer.poll(0.1)
            if msg is None or msg.error() or msg.partition() not in left:
                continue
            left.discard(msg.partition())
            top = max(top, decode_message(msg.value())[-1].lsn)
        return top
    except KafkaException:
        return 0
    finally:
        consumer.close()


class Delivery:
    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.topic = topic
        self.partitions = partitions
        self.produced = [0] * partitions
        self.acked = [0] * partitions
        self.errors: list[str] = []
        self.published = 0  # events produced by this pass
        # checkpoints taken, not yet saved: (checkpoint, produced counts when taken), oldest first
        self.in_flight: deque[tuple[Checkpoint, list[int]]] = deque()
        # The delivery report callback is the producer's (not one per produce() call: that
        # allocates a holder per message, a fifth of the produce call's cost).
        self.producer = Producer(
            {**transport.producer_config(bootstrap), "error_cb": self._on_error, "on_delivery": self._on_delivery}
        )

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()] += 1

    def _on_error(self, err) -> None:
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._FATAL):
            self.errors.append(f"broker connection: {err}")

    def produce(self, partition: int, events: list[ChangeEvent]) -> None:
        """A partition's events, in order, as few messages as they fit in."""
        payloads = encode_messages(events)
        producer, topic = self.producer, self.topic
        for payload in payloads:
            # No key: the partition is chosen by the replicator (events.partition_of, per
            # row), and a message holds many rows.
            while True:
                try:
                    producer.produce(topic, value=payload, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    if isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                        raise EventTooLarge(payload) from exc
                    raise DeliveryError(f"produce failed: {exc}") from exc
        self.produced[partition] += len(payloads)
        self.published += len(events)

    def flush(self, pending: dict[int, list[ChangeEvent]], keep_last: bool = False) -> None:
        """Every partition's queued events, one message per partition (more when large).
        `keep_last`: a transaction is still being queued, and each partition's last event
        stays queued, as it may be the one to carry txn_end (publish.close_txn)."""
        kept = {}
        for partition, events in pending.items():
            if keep_last:
                kept[partition] = events[-1:]
                events = events[:-1]
            if events:
                self.produce(partition, events)
        pending.clear()
        pending.update(kept)

    def note(self, pending: dict, checkpoint: Checkpoint, keep_last: bool = False) -> None:
        """Take `checkpoint`: produce what is queued, then remember the counts it needs
        (what stays queued belongs to a transaction after the checkpoint's position)."""
        self.flush(pending, keep_last)
        self.in_flight.append((checkpoint, list(self.produced)))

    def acked_checkpoint(self) -> Checkpoint | None:
        """The newest checkpoint the broker acked everything up to (None: none new, or an
        error was reported, which ends the pass)."""
        newest = None
        acked = self.acked
        while self.in_flight and all(a >= n for a, n in zip(acked, self.in_flight[0][1], strict=True)):
            newest = self.in_flight.popleft()[0]
        return None if self.errors else newest

    def retry_later(self, checkpoint: Checkpoint) -> None:
        """A checkpoint that could not be saved (meta down): offered again by the next call."""
        self.in_flight.appendleft((checkpoint, [0] * self.partitions))

    def check(self) -> None:
        if self.errors:
            raise DeliveryError(f"broker refused events: {self.errors[0]}")

    def drain(self, timeout: float = 5.0) -> None:
        """Wait for every ack; raises if some never came (the checkpoint then stays)."""
        remaining = self.producer.flush(timeout)
        if remaining or self.errors:
            raise DeliveryError(f"broker did not ack {remaining} events ({self.errors[:1]}): checkpoint not advanced")
