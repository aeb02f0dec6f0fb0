"""What a zone's topic holds past a checkpoint: the events a failover must continue from.

A replicator publishes ahead of its saved checkpoint (it saves one once the broker acked
it). When its server dies, the events published after the newest checkpoint are in the
topic and may already be applied. The promoted replica's chain must go on from them, not
from the checkpoint: an applier that applied them would otherwise see the new events'
prev_lsn point behind its applied LSN, a gap no resend can fill (the old server's binlog
is gone). So the promotion reads, per partition, every event after the checkpoint's LSN:
how many (the published counts go on exactly) and the last one (the next prev_lsn).

Messages are read backwards from each partition's end, one at a time, until one holds an
event first published (not is_retry) at or below the checkpoint's LSN: first
publications are in LSN order, so nothing before it is past the checkpoint; re-published
ones (a restart or a resend re-reads older events) are stepped over. An event published
twice is counted once. The events past a checkpoint are a few messages.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, TopicPartition

from zonesync.events import decode_message
from zonesync.runtime import transport

MAX_MESSAGES = 100_000  # per partition: past it the checkpoint is far too old to map


class TailUnread(RuntimeError):
    """The topic did not answer, or holds too much past the checkpoint: the message says which."""


def _message_at(consumer, topic: str, partition: int, offset: int, timeout: float):
    consumer.assign([TopicPartition(topic, partition, offset)])
    for _ in range(int(timeout / 0.1)):
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            raise TailUnread(f"topic {topic} partition {partition}: {msg.error()}")
        if msg.partition() == partition and msg.offset() == offset:
            return msg
    raise TailUnread(f"topic {topic} partition {partition}: offset {offset} did not arrive within {timeout:g} s")


def events_after(bootstrap: str, topic: str, partitions: int, after: dict[int, int],
                 timeout: float = 10.0) -> dict[int, tuple[int, int]]:  # fmt: skip
    """partition -> (events with an LSN above after[partition], the last one's LSN), for the
    partitions that hold any; TailUnread when the topic does not answer."""
    consumer = Consumer(transport.consumer_config(bootstrap, "zonesync-failover-tail"))
    out: dict[int, tuple[int, int]] = {}
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            floor, newer = after.get(p, 0), set()
            offset = high - 1
            while offset >= low:
                if high - offset > MAX_MESSAGES:
                    raise TailUnread(f"topic {topic} partition {p}: over {MAX_MESSAGES} messages past the checkpoint")
                events = decode_message(_message_at(consumer, topic, p, offset, timeout).value())
                newer.update(e.lsn for e in events if e.lsn > floor)
                if any(e.lsn <= floor and not e.is_retry for e in events):
                    break
                offset -= 1
            if newer:
                out[p] = (len(newer), max(newer))
        return out
    except KafkaException as exc:
        raise TailUnread(f"topic {topic}: {exc}") from None
    finally:
        consumer.close()
