"""Step 4 of the applier (applier.py): a round's chains applied on the workers.

A round's shares go to single-threaded lanes, worker p % workers for partition p,
so a key (one partition number in every source) is applied by one worker, in
order. Rounds overlap (`rounds_in_flight`): the loop reads and decodes the next
round while the target commits this one; `reap` records rounds in the order
they were handed out, and a failed share stops every later one on its worker
(`failed`) so no later round commits past a rolled-back one. A small round, a
round while a partition stands stopped (serial retries), and weighted rounds run
to their commit on the loop's own thread.
"""

from __future__ import annotations

import threading
from collections import deque

from zonesync.apply.loop.partitions import PartitionBook
from zonesync.apply.loop.settings import ApplierSettings


class Rounds:
    """Applying rounds: given the partitions' book (chains handed out count as applied;
    offsets, backlogs and stops as they commit), the settings, the calling thread's
    writer (`writer()`), and what to do with a share's result (`record(result)`: count
    its changes, alert its locked rows)."""

    def __init__(self, book: PartitionBook, settings: ApplierSettings, writer, record):
        self.book = book
        self.settings = settings
        self.writer = writer
        self.record = record

    def run(
        self, lanes, in_flight: deque, failed: threading.Event, rounds: dict[int, list], whole: bool = False
    ) -> None:
        """Hand one round to the workers (worker i's share to lane i), or apply it here.

        The chains count as applied from now on for continuity (the next round's first
        events follow them); their offsets and commit times are recorded when the round
        committed (`reap`). Weight levels (Otter's 权重): a level starts only when the
        previous one committed in every worker, so rows of a heavier table (a child) never
        land before the lighter ones (its parent) of the same round; such rounds run to
        their commit before the loop goes on. `whole` (atomic_transactions: a source
        transaction spans two workers, or tables have weights): the round is one target
        transaction on one connection, tables in weight order inside it (writer.py).
        """
        shares = list(rounds.values())
        state = self.book.state
        for share in shares:
            for key, chain in share:
                state[key].applied_lsn = chain[-1][0].lsn
        small = sum(len(chain) for share in shares for _, chain in share) <= self.settings.small_round
        small = small or bool(self.book.stops)  # one connection, one serial order (writer.py)
        weights = self.settings.table_weights
        if (small or weights or whole) and in_flight:
            self.reap(in_flight, keep=0)  # the round below runs outside the lanes' order
        if whole:
            everything = [item for share in shares for item in share]
            self._apply_share(_changes(everything), _positions(everything))
            self.committed(shares)
            return
        if small:
            # A small round is one transaction on one connection: in a quiet stream a round
            # is a few events, and its latency (one commit, no hand-off) is what counts.
            # Nothing is in flight, so this thread may apply any partition's chain.
            self._apply_levels([[item for share in shares for item in share]])
            self.committed(shares)
            return
        if weights:
            self._apply_levels(shares, lanes)
            self.committed(shares)
            return
        self.reap(in_flight, keep=self.settings.rounds_in_flight - 1)
        futures = [
            lanes[lane].submit(self._lane_share, failed, _changes(share), _positions(share))
            for lane, share in rounds.items()
        ]
        in_flight.append((futures, shares))

    def _lane_share(self, failed: threading.Event, changes, positions) -> None:
        if failed.is_set():
            raise RuntimeError("an earlier share failed: later ones are not applied")
        try:
            self._apply_share(changes, positions)
        except BaseException:
            failed.set()
            raise

    def reap(self, in_flight: deque, keep: int) -> None:
        """Wait until at most `keep` rounds are in flight; record those that committed, in
        order. A failed share re-raises here: the pass restarts from apply_state."""
        while in_flight and (len(in_flight) > keep or all(f.done() for f in in_flight[0][0])):
            futures, shares = in_flight.popleft()
            for fut in futures:
                fut.result()
            self.committed(shares)

    def committed(self, shares) -> None:
        """Shares that committed: their partitions' offsets, backlogs and stops."""
        book = self.book
        offsets, backlogs, stops, expired_waits = book.offsets, book.backlog, book.stops, book.expired_waits
        for share in shares:
            for key, chain in share:
                last_event, last_offset = chain[-1]
                offsets[key] = last_offset
                backlog = backlogs.get(key)
                if backlog is not None:
                    backlog.on_commit(last_event.lsn)  # what it read up to here is applied (lag_report.py)
                if key in stops and last_event.lsn >= stops[key][0]:
                    del stops[key]  # its stopped event is applied (or its row locked)
                    expired_waits.difference_update([w for w in expired_waits if w[:2] == key])

    def _apply_levels(self, shares: list[list], lanes=None) -> None:
        """Apply shares to their commit: level by level (one level without weights),
        each level's shares in parallel on the lanes, positions with the last level."""
        weights = self.settings.table_weights
        # without weights every table is level 0: no need to look at each event for it
        levels = [0]
        if weights:
            levels = sorted({weights.get(e.table, 0) for share in shares for _, ch in share for e, _ in ch})
        for i, level in enumerate(levels):
            last = i == len(levels) - 1
            work = []
            for share in shares:
                if len(levels) == 1:
                    changes, positions = _changes(share), _positions(share)
                else:
                    changes = [
                        (key[0], [e for e, _ in chain if weights.get(e.table, 0) == level]) for key, chain in share
                    ]
                    changes = [c for c in changes if c[1]]
                    positions = _positions(share) if last else []
                if changes or positions:
                    work.append((changes, positions))
            if len(work) == 1 or lanes is None:  # one share (a quiet round): no hand-off to a thread
                for w in work:
                    self._apply_share(*w)
                continue
            for fut in [lanes[n % len(lanes)].submit(self._apply_share, *w) for n, w in enumerate(work)]:
                fut.result()  # re-raises: the pass restarts from apply_state

    def _apply_share(self, changes, positions) -> None:
        self.record(self.writer().apply_many(changes, positions))


def _changes(share) -> list:
    """A worker's share as the writer takes it: (source zone, events) per partition."""
    return [(key[0], [e for e, _ in chain]) for key, chain in share]


def _positions(share) -> list:
    """(source zone, partition, last LSN, its Kafka offset, the LSN the chain starts after,
    the chain's events) per partition of a share: the writer records the first four and
    adds the count (for `zonesync reconcile`) once it has checked where the chain starts."""
    return [(key[0], key[1], chain[-1][0].lsn, chain[-1][1], chain[0][0].prev_lsn, len(chain)) for key, chain in share]
