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
`hold_rows` rows), which is then applied in parts. The price: rounds with transactions
that span workers run on one connection, so bulk transactions lose the parallel apply.
"""

from __future__ import annotations

from collections import Counter

Key = tuple[str, int]  # (source zone, partition)


def whole_transactions(
    jobs: dict[Key, list], waiting_since: dict, now: float, timeout: float, hold_rows: int
) -> tuple[dict[Key, list], dict[Key, list]]:
    """(what may be applied, what is held back) per partition, from the round's accepted
    chains of (event, Kafka offset). `waiting_since` remembers since when each incomplete
    transaction waits (updated here). A chain cut inside a message records the message
    before as read (its offset - 1), so a restart reads that message again."""
    kept = {key: list(chain) for key, chain in jobs.items()}
    held: dict[Key, list] = {}
    through: set = set()  # let through incomplete (too large, or waited out): not judged again
    while True:
        present = Counter((key[0], e.txn_id) for key, chain in kept.items() for e, _ in chain)
        needed = {(key[0], e.txn_id): e.row_count for key, chain in kept.items() for e, _ in chain}
        short = set()
        for txn, count in present.items():
            if txn in through:
                continue
            if count < needed[txn] <= hold_rows and now - waiting_since.setdefault(txn, now) < timeout:
                short.add(txn)
            else:  # whole (for now: a cut may change that), too large to hold, or waited out
                waiting_since.pop(txn, None)
                if count < needed[txn]:
                    through.add(txn)
        if not short:
            break
        for key, chain in list(kept.items()):
            cut = next((i for i, (e, _) in enumerate(chain) if (key[0], e.txn_id) in short), None)
            if cut is None:
                continue
            held[key] = chain[cut:] + held.get(key, [])
            if cut == 0:
                del kept[key]
                continue
            head = chain[:cut]
            if head[-1][1] == chain[cut][1]:  # cut inside a message: that message is not read yet
                head[-1] = (head[-1][0], head[-1][1] - 1)
            kept[key] = head
    return kept, held


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
