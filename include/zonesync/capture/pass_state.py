"""One pass of the replicator (replicator.py), as Vitess's vplayer keeps one: where it
reads, what it has queued and not yet produced, the last commit it may checkpoint, and
the resend it serves. The replicator's handlers (one per event kind) and its periodic
`tick()` read and move it; a new pass starts from a new one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from zonesync.capture import gtid
from zonesync.capture.checkpoints import Checkpoint
from zonesync.capture.delivery import Delivery
from zonesync.capture.publish import Txn, queue_txn_events
from zonesync.events import ChangeEvent


@dataclass(eq=False)
class PassState:
    zone: str
    source: tuple[str, int, int]  # (zone, zone id, partition count): what queue_txn_events stamps
    delivery: Delivery
    bootstrap_used: str  # the broker this pass produces to: a new one ends the pass
    partition_lsns: dict[int, int]  # each partition's last LSN: the next event's prev_lsn
    # events given a place in each partition's chain (None: the chain began before
    # counting; its events are not counted, see 0007)
    partition_counts: dict[int, int] | None
    hwm: int  # LSNs up to it were published before: re-read, they go out as is_retry
    resend_ids: list  # the resend requests this pass serves ([]: none)
    retry_partitions: set[int] | None  # in a resend pass, the partitions re-published up to hwm
    retry_until: int  # the old high-water mark a resend re-publishes up to
    pending: dict[int, list[ChangeEvent]] = field(default_factory=dict)  # read, not yet produced
    pending_since: float = 0.0  # when the oldest of them was queued
    txn: Txn | None = None  # the transaction being read (from its GTID event to its commit)
    boundary: tuple[str, int] | None = None  # position after the last commit read
    boundary_dirty: bool = False  # ... not yet in a checkpoint
    last_cp_time: float = 0.0
    last_request_poll: float = 0.0
    # the server read (segments.py): its number, its LSNs' file offset and floor (every
    # checkpoint's key is at least the floor, so the segment's first one outranks every
    # checkpoint of the servers before it)
    segment: int = 0
    lsn_file_offset: int = 0
    lsn_floor: int = 0
    # GTID state (gtid.py) at the boundary; None: unknown (the server could not say)
    gtid_state: dict | None = None
    gtid_read: tuple[int, int, int] | None = None  # (domain, server, seq) of the transaction being read

    @property
    def streaming(self) -> bool:
        """A large transaction read again (step 2), its rows events queued as they are read."""
        return self.txn is not None and self.txn.total is not None

    def full(self, partition: int, queue: list) -> None:
        """A queue reached its size during a transaction: produced but for its last event,
        which may end its transaction in this partition (close_txn marks it)."""
        self.delivery.produce(partition, queue[:-1])
        self.pending[partition] = queue[-1:]

    def queue(self, txn: Txn, log_file: str, commit_ts: int, first_index: int = 0) -> None:
        """Step 4 for a committed transaction (or a streamed one's rows event)."""
        if not self.pending:
            self.pending_since = time.monotonic()
        self.hwm = queue_txn_events(
            txn,
            log_file,
            commit_ts,
            self.source,
            self.partition_lsns,
            self.hwm,
            self.retry_partitions,
            self.pending,
            self.full,
            first_index=first_index,
            partition_counts=self.partition_counts,
            lsn_file_offset=self.lsn_file_offset,
        )

    def commit_read(self, log_file: str, log_pos: int) -> None:
        """The position after a transaction (or a DDL) is a boundary a checkpoint may take."""
        self.txn = None
        self.boundary = (log_file, log_pos)
        self.boundary_dirty = True
        if self.gtid_read is not None:
            if self.gtid_state is not None:
                domain, server, seq = self.gtid_read
                self.gtid_state[domain] = (server, seq)
            self.gtid_read = None

    def checkpoint(self) -> Checkpoint:
        """A checkpoint at the boundary (the position after the last commit read)."""
        lsn = max(max(self.partition_lsns.values(), default=0), self.lsn_floor)
        counts = None if self.partition_counts is None else dict(self.partition_counts)
        gtid_pos = None if self.gtid_state is None else gtid.render(self.gtid_state)
        return Checkpoint(
            self.zone, lsn, self.boundary[0], self.boundary[1], dict(self.partition_lsns), self.hwm, counts,
            self.segment, gtid_pos,
        )  # fmt: skip
