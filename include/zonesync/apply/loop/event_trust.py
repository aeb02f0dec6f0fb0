"""What an applier checks of each event before it applies it (issue 24: forged or
foreign events), beyond the decoder's types (events.py).

Anything that can produce to a zone's topic could otherwise write rows in every zone,
or plant a `_zs_version` far in the future that makes every later real change of the
row "older" and silently skipped. Each refusal is an EventError: the applier halts that
partition with an alert naming the message's offset and the event (never a silent
drop). `zonesync resume` reads the partition again from its applied position, so it
halts again at the same message: what to do with a message no zone wrote (skip it by
moving the partition's position past it, or find who produced it) is the operator's
decision, not the applier's.

- The event's source zone is the topic's zone, and its partition the Kafka partition it
  came on: a zone's topic carries only what that zone's replicator read from its
  binlog, each event in the partition of its key (a forged partition would steer a
  halt or a stop to another partition than the one holding the event).
- Its version is not absurdly ahead of this applier's clock: versions are a hybrid
  logical clock in microseconds (dal/hlc.py) that stays within clock skew of wall time,
  so one more than `max_ahead_s` ahead (6 hours by default, ZONESYNC_APPLY_MAX_VERSION_AHEAD_S;
  the mesh's tests run guards an hour apart) is no zone's.

- Its table is one the rules declare and the topic's zone owned the row's ZSID when it
  was written, allowing for the switch history (owner_history.py), unless the applier
  runs with owners unchecked (ZONESYNC_APPLY_CHECK_OWNERS=0).
"""

from __future__ import annotations

import time

from zonesync.apply.loop.owner_history import OwnerHistory
from zonesync.apply.loop.settings import MAX_VERSION_AHEAD_S
from zonesync.events import ChangeEvent, EventError


class EventTrust:
    def __init__(
        self,
        max_ahead_s: float = MAX_VERSION_AHEAD_S,
        now_us=lambda: time.time_ns() // 1000,
        owners: OwnerHistory | None = None,
    ):
        self.max_ahead_us = int(max_ahead_s * 1_000_000)
        self.now_us = now_us
        self.owners = owners

    def check(self, events: list[ChangeEvent], source_zone: str, partition: int) -> None:
        """EventError naming the first event of `events` (one message of `source_zone`'s
        topic, from `partition`) that this applier must not apply."""
        bound = self.now_us() + self.max_ahead_us
        for e in events:
            if e.partition != partition:
                raise EventError(f"event LSN {e.lsn} names partition {e.partition} but came on partition {partition}")
            if e.source_zone != source_zone:
                raise EventError(f"event LSN {e.lsn} names source zone {e.source_zone!r} but came on zone "
                                 f"{source_zone}'s topic")  # fmt: skip
            if e.version > bound:
                ahead = (e.version - bound) / 1e6 + self.max_ahead_us / 1e6
                raise EventError(f"event LSN {e.lsn} of {e.table}: version {e.version} is {ahead:,.0f} s ahead of "
                                 f"this applier's clock (the bound is {self.max_ahead_us / 1e6:g} s, "
                                 "ZONESYNC_APPLY_MAX_VERSION_AHEAD_S)")  # fmt: skip
            if self.owners is not None:
                self.owners.check(e)
