"""What the applier knows per (source zone, partition), in one place: the loop
(applier.py) and its collaborators (rounds.py, lag_report.py, partition_faults.py)
are each given this book, instead of reaching into one another's attributes.

A pass starts from apply_state (`reset`, then `take` per partition assigned); what
survives a pass (a partition stopped at an event serial apply could not place, a
wait that expired into a row lock, the size of the last message read) is kept.
"""

from __future__ import annotations

from zonesync.apply.loop.continuity import PartitionState
from zonesync.apply.loop.lag_report import Backlog


class PartitionBook:
    __slots__ = ("backlog", "expired_waits", "held", "held_since", "offsets", "per_message", "state", "stops")

    def __init__(self):
        self.state: dict[tuple[str, int], PartitionState] = {}
        self.offsets: dict[tuple[str, int], int] = {}  # the Kafka offset of the last event committed
        self.backlog: dict[tuple[str, int], Backlog] = {}  # messages read, not applied (lag_report.py)
        self.held: dict[tuple[str, int], list] = {}  # a transaction's rows, its end not read
        self.held_since: dict[tuple[str, int], float] = {}
        self.per_message: dict[tuple[str, int], int] = {}  # events in the last message read
        # partitions stopped before an event serial apply could not place: partition -> (LSN, since)
        self.stops: dict[tuple[str, int], tuple[int, float]] = {}
        # (source, partition, LSN): lock the row, don't wait (the writers share this set)
        self.expired_waits: set[tuple[str, int, int]] = set()

    def reset(self) -> None:
        """A pass starts: every partition is taken from apply_state again."""
        self.state, self.offsets, self.backlog = {}, {}, {}
        self.held, self.held_since = {}, {}

    def take(self, key: tuple[str, int], lsn: int, offset: int, halted: bool) -> None:
        """A partition from its recorded position: applied `lsn`, from Kafka `offset`."""
        self.state[key] = PartitionState(applied_lsn=lsn, halted=halted)
        self.offsets[key] = offset
        self.backlog[key] = Backlog(lsn, offset + 1)

    def drop(self, key: tuple[str, int]) -> None:
        """A partition given up (group mode: revoked)."""
        self.state.pop(key, None)
        self.offsets.pop(key, None)
        self.backlog.pop(key, None)
        self.held.pop(key, None)
        self.stops.pop(key, None)
