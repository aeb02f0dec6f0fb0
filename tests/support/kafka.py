"""Stand-ins for confluent_kafka objects in unit tests."""

from __future__ import annotations


class FakeMessage:
    """A consumed Kafka message, as the applier reads it: no error, its topic, partition,
    offset, value and (type, milliseconds) timestamp ((0, -1): none)."""

    def __init__(self, partition: int, offset: int, value: bytes, timestamp=(0, -1), topic: str = "zonesync.a.changes"):
        self._partition, self._offset, self._value = partition, offset, value
        self._timestamp, self._topic = timestamp, topic

    def error(self):
        return None

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def value(self):
        return self._value

    def timestamp(self):
        return self._timestamp
