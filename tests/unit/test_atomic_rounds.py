"""atomic_rounds.whole_transactions: a round takes only source transactions whose every row
is in it (S002-02 across partitions), cutting each partition's chain before the first row
of one that is not, and again for transactions that cut makes incomplete."""

from __future__ import annotations

from tests.support.events import change_event
from zonesync.apply.loop.atomic_rounds import MAX_RELEASED, RELEASED, spans_workers, whole_transactions
from zonesync.events import INSERT


def ev(lsn: int, partition: int, txn: str, count: int, end: bool = False):
    return change_event(lsn=lsn, op=INSERT, table="t", pk={"id": lsn}, version=1, partition=partition, txn_id=txn,
                        row_count=count, new={"id": lsn}, txn_end=end)  # fmt: skip


def lsns(chains: dict) -> dict:
    return {key: [(e.lsn, offset) for e, offset in chain] for key, chain in chains.items()}


def test_complete_transactions_pass_whole():
    jobs = {("a", 0): [(ev(1, 0, "t1", 2), 10)], ("a", 1): [(ev(2, 1, "t1", 2), 20)]}
    kept, held = whole_transactions(jobs, {}, now=0.0, timeout=5, hold_rows=100, max_held=1000)
    assert lsns(kept) == lsns(jobs) and held == {}


def test_a_transaction_missing_a_row_is_held_in_every_partition_with_what_follows_it():
    # t1: 3 rows, one not yet read (partition 2's); t2 follows t1 in partition 0; t0 is whole
    jobs = {
        ("a", 0): [(ev(1, 0, "t0", 1), 10), (ev(3, 0, "t1", 3), 11), (ev(5, 0, "t2", 1), 11)],
        ("a", 1): [(ev(4, 1, "t1", 3), 20)],
    }
    waiting: dict = {}
    kept, held = whole_transactions(jobs, waiting, now=0.0, timeout=5, hold_rows=100, max_held=1000)
    # cut inside the message at offset 11: the message before it counts as read
    assert lsns(kept) == {("a", 0): [(1, 10)]}
    assert lsns(held) == {("a", 0): [(3, 11), (5, 11)], ("a", 1): [(4, 20)]}
    assert waiting == {("a", "t1"): 0.0, ("a", "t2"): 0.0}, "t2 waits behind t1"


def test_cutting_one_transaction_can_make_another_incomplete():
    # partition 0: t1 (incomplete) then t2's first row; partition 1: t2's second row
    jobs = {
        ("a", 0): [(ev(1, 0, "t1", 2), 10), (ev(3, 0, "t2", 2), 11)],
        ("a", 1): [(ev(4, 1, "t2", 2), 20)],
    }
    kept, held = whole_transactions(jobs, {}, now=0.0, timeout=5, hold_rows=100, max_held=1000)
    assert kept == {}, "t2's row in partition 1 waits with its partition-0 row, held behind t1"
    assert lsns(held) == {("a", 0): [(1, 10), (3, 11)], ("a", 1): [(4, 20)]}


def test_a_transaction_that_waited_out_the_timeout_or_is_too_large_goes_through():
    jobs = {("a", 0): [(ev(1, 0, "t1", 2), 10)]}
    waiting = {("a", "t1"): 0.0}
    kept, held = whole_transactions(jobs, waiting, now=5.0, timeout=5, hold_rows=100, max_held=1000)
    assert lsns(kept) == lsns(jobs) and held == {}
    assert waiting == {("a", "t1"): RELEASED}, "let through short of a row: its last row will pass at once"
    big = {("a", 0): [(ev(1, 0, "t9", 500), 10)]}
    kept, held = whole_transactions(big, {}, now=0.0, timeout=5, hold_rows=100, max_held=1000)
    assert lsns(kept) == lsns(big), "streamed: applied in parts"


def test_sources_are_told_apart():
    # the same transaction id in two sources is two transactions
    jobs = {("a", 0): [(ev(1, 0, "t1", 1), 10)], ("c", 0): [(ev(2, 0, "t1", 1), 30)]}
    kept, held = whole_transactions(jobs, {}, now=0.0, timeout=5, hold_rows=100, max_held=1000)
    assert lsns(kept) == lsns(jobs)


def test_a_transaction_spans_workers_when_its_partitions_map_to_two():
    jobs = {("a", 0): [(ev(1, 0, "t1", 2), 10)], ("a", 4): [(ev(2, 4, "t1", 2), 20)]}
    assert not spans_workers(jobs, workers=4), "partitions 0 and 4: worker 0 both"
    assert spans_workers(jobs, workers=3)
    assert not spans_workers({("a", 1): [(ev(1, 1, "t1", 1), 1)], ("a", 2): [(ev(2, 2, "t2", 1), 2)]}, workers=4)


def test_a_waited_out_transaction_is_not_held_again_when_another_is_cut():
    # t1 waited out (goes through), t2 incomplete and before t1 in partition 0: t1's partition-0
    # row is held behind t2; its partition-1 row still goes (t1 is no longer waited for)
    jobs = {
        ("a", 0): [(ev(1, 0, "t2", 2), 10), (ev(2, 0, "t1", 3), 11)],
        ("a", 1): [(ev(3, 1, "t1", 3), 20)],
    }
    waiting = {("a", "t1"): 0.0}
    kept, held = whole_transactions(jobs, waiting, now=9.0, timeout=5, hold_rows=100, max_held=1000)
    assert lsns(kept) == {("a", 1): [(3, 20)]}
    assert lsns(held) == {("a", 0): [(1, 10), (2, 11)]}
    assert waiting == {("a", "t2"): 9.0, ("a", "t1"): RELEASED}, "t1 went short of its partition-0 row"


def test_holding_more_than_the_cap_lets_the_round_through():
    """A backlog read one partition after another would hold everything: past `max_held`
    events the round goes through as it is (memory bounded, atomicity given up for it)."""
    jobs = {("a", 0): [(ev(n, 0, f"t{n}", 2), n) for n in range(1, 6)]}  # five halves of transactions
    waiting: dict = {}
    kept, held = whole_transactions(jobs, waiting, now=0.0, timeout=5, hold_rows=100, max_held=4)
    assert lsns(kept) == lsns(jobs) and held == {}
    assert waiting == {("a", f"t{n}"): RELEASED for n in range(1, 6)}
    waiting = {}
    kept, held = whole_transactions(jobs, waiting, now=0.0, timeout=5, hold_rows=100, max_held=5)
    assert kept == {} and len(held[("a", 0)]) == 5


def test_the_rest_of_a_released_transaction_passes_at_once():
    """A round let through by `max_held` applied t1's partition-0 row; its partition-1 row,
    read later, can never make t1 whole: it passes in its own round, with what follows it,
    instead of waiting out the timeout (catch-ups stalled 5 s at a time on such remnants)."""
    waiting: dict = {}
    first = {("a", 0): [(ev(1, 0, "t1", 2), 10), (ev(2, 0, "t2", 2), 11)]}
    kept, held = whole_transactions(first, waiting, now=0.0, timeout=5, hold_rows=100, max_held=1)
    assert lsns(kept) == lsns(first)
    later = {("a", 1): [(ev(3, 1, "t1", 2), 20), (ev(4, 1, "t3", 1), 21)]}
    kept, held = whole_transactions(later, waiting, now=0.1, timeout=5, hold_rows=100, max_held=1000)
    assert lsns(kept) == lsns(later) and held == {}
    # a transaction never let through still waits
    kept, held = whole_transactions({("a", 2): [(ev(5, 2, "t4", 2), 30)]}, waiting, now=0.2, timeout=5,
                                    hold_rows=100, max_held=1000)  # fmt: skip
    assert kept == {} and lsns(held) == {("a", 2): [(5, 30)]}


def test_released_transactions_are_remembered_up_to_a_bound():
    waiting: dict = {}
    for n in range(MAX_RELEASED + 10):
        whole_transactions({("a", 0): [(ev(n, 0, f"t{n}", 2), n)]}, waiting, now=9.0, timeout=5, hold_rows=100,
                           max_held=0)  # fmt: skip
    assert len(waiting) == MAX_RELEASED
    assert ("a", "t0") not in waiting and ("a", f"t{MAX_RELEASED + 9}") in waiting, "the oldest are forgotten"
