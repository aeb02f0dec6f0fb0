"""Whole source transactions across partitions (seed S002-02 事务完整性, S003-24 权重), a
pure function for the applier's `atomic_transactions` mode.

A source transaction's rows hash to several partitions (by table and primary key), and
by default each partition's share is applied on its own worker: a reader of the target
can see one partition's rows of a transaction before another's (product without its
product_detail). With `atomic_transactions` the applier instead:

1. takes into a round only transactions whose every row is in it: every event carries
   its transaction's row count, and a transaction with fewer of its events in the round
   is held back, in every partition, with everything after it in those partitions (per
   partition order); cutting one transaction can make another incomplete, so the cut is
   repeated until nothing changes;
2. applies a round in which a transaction spans the partitions of two workers as one
   target transaction on one connection (and, with table weights, every round, tables in
   weight order inside it), so the transaction's rows become visible together.

A transaction whose rows never all arrive (part of it applied before a restart in the
default mode, or a transaction of a replicator from before row counts) is let through
once it waited `timeout` seconds, and so is one too large to hold (streamed: more than
`hold_rows` rows), which is then applied in parts. A transaction let through short of
rows is remembered as released (RELEASED in `waiting_since`): its remaining rows, when
they come, can never make it whole, so they pass at once instead of waiting out the
timeout again with everything behind them (session 12 found catch-ups stalled 5 s at a
time on such remnants after a round let through by `max_held`). The price: rounds with transactions
that span workers run on one connection, so bulk transactions lose the parallel apply.
"""

from __future__ import annotations

Key = tuple[str, int]  # (source zone, partition)
RELEASED = float("-inf")  # in waiting_since: let through short of rows; the rest passes at once
MAX_RELEASED = 10_000  # remembered released transactions (oldest forgotten first)


def whole_transactions(
    jobs: dict[Key, list], waiting_since: dict, now: float, timeout: float, hold_rows: int, max_held: int
) -> tuple[dict[Key, list], dict[Key, list]]:
    """(what may be applied, what is held back) per partition, from the round's accepted
    chains of (event, Kafka offset). `waiting_since` remembers since when each incomplete
    transaction waits (updated here). A chain cut inside a message records the message
    before as read (its offset - 1), so a restart reads that message again. Holding more
    than `max_held` events (a backlog fetched one partition after another) lets the round
    through whole instead: memory stays bounded, at the price of atomicity for it."""
    # Where each transaction's rows are (partition, index), and how many stay in the round.
    where: dict[tuple[str, str], list[tuple[Key, int]]] = {}
    needed: dict[tuple[str, str], int] = {}
    for key, chain in jobs.items():
        for i, (e, _) in enumerate(chain):
            txn = (key[0], e.txn_id)
            where.setdefault(txn, []).append((key, i))
            needed[txn] = e.row_count
    present = {txn: len(rows) for txn, rows in where.items()}
    short_of_rows = {txn for txn, n in present.items() if n < needed[txn]}
    cut = {key: len(chain) for key, chain in jobs.items()}  # each chain is kept up to here

    def waits(txn) -> bool:
        """Short of rows, and neither too large to hold nor waited out: held back."""
        if needed[txn] > hold_rows or now - waiting_since.setdefault(txn, now) >= timeout:
            return False
        return True

    short = [txn for txn, n in present.items() if n < needed[txn] and waits(txn)]
    held_txns = set(short)
    while short:  # each event is removed once: linear in the round
        txn = short.pop()
        for key, i in where[txn]:
            if i >= cut[key]:
                continue
            chain = jobs[key]
            for e, _ in chain[i : cut[key]]:
                other = (key[0], e.txn_id)
                present[other] -= 1
                if other not in held_txns and waits(other):
                    held_txns.add(other)
                    short.append(other)
            cut[key] = i
    for txn in present:
        if txn not in held_txns:  # applied now: whole, too large to hold, or waited out
            _applied(waiting_since, txn, txn in short_of_rows)
    kept: dict[Key, list] = {}
    held: dict[Key, list] = {}
    for key, chain in jobs.items():
        at = cut[key]
        if at < len(chain):
            held[key] = chain[at:]
        if at:
            head = chain[:at]
            if at < len(chain) and head[-1][1] == chain[at][1]:  # cut inside a message: not read yet
                head[-1] = (head[-1][0], head[-1][1] - 1)
            kept[key] = head
    if sum(len(events) for events in held.values()) > max_held:
        for txn in held_txns:
            _applied(waiting_since, txn, txn in short_of_rows)
        return jobs, {}
    return kept, held


def _applied(waiting_since: dict, txn, short: bool) -> None:
    """A transaction leaves the round applied: forgotten if whole, remembered as released
    if some of its rows are still to come (bounded: the oldest released are forgotten)."""
    waiting_since.pop(txn, None)
    if short:
        waiting_since[txn] = RELEASED
        if len(waiting_since) > MAX_RELEASED:
            oldest = next((t for t, since in waiting_since.items() if since == RELEASED), None)
            if oldest is not None:
                del waiting_since[oldest]


def spans_workers(jobs: dict[Key, list], workers: int) -> bool:
    """Does a transaction of the round have rows in partitions of two workers (partition p
    is worker p % workers)?"""
    seen: dict[tuple[str, str], int] = {}
    for (source, partition), chain in jobs.items():
        worker = partition % workers
        for e, _ in chain:
            if seen.setdefault((source, e.txn_id), worker) != worker:
                return True
    return False
