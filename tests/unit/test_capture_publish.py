"""Step 4 of the replicator (capture/publish.py): a committed transaction's rows as
ChangeEvents, queued per partition. The Python path (rows given as lists of images; the C
module's NativeRows are checked against it in integration/capture/test_native_rows.py).

The rules: each row's LSN is (binlog file, end of its rows event, row index in it); its
partition is events.partition_of of its table and key text; prev_lsn is the partition's
previous LSN, carried across transactions; row_index counts the transaction's rows from
`first_index` and row_count is its total; an event at or below the high-water mark is a
retry, queued only for the partitions asked again, but it takes its place in the chain
either way; a delete's version outranks the deleted row's; a queue that reaches
MAX_MESSAGE_EVENTS goes out at once; close_txn marks each partition's last row.
"""

from __future__ import annotations

import datetime as dt

import msgspec
import pytest

from zonesync.capture.publish import Txn, close_txn, queue_txn_events
from zonesync.events import (
    DELETE,
    INSERT,
    MAX_MESSAGE_EVENTS,
    MAX_ROWS_PER_EVENT,
    UPDATE,
    EventError,
    decode_row,
    encode_row,
    make_lsn,
    partition_of,
    pk_text,
    split_lsn,
)

pytestmark = pytest.mark.unit

LOG = "binlog.000007"
PARTITIONS = 4
SOURCE = ("a", 1, PARTITIONS)  # (zone, zone id, partition count)


def _row(tenant: int, version: int = 1, origin: int | None = 1, **extra) -> dict:
    row = {"tenant_id": tenant, "name": f"t{tenant}", "_zs_version": version, **extra}
    if origin is not None:
        row["_zs_origin"] = origin
    return row


def _inserts(*tenants: int, end_pos: int = 1000) -> tuple:
    return ("tenants", ["tenant_id"], INSERT, [(None, _row(t)) for t in tenants], end_pos, True)


def _queue(txn, hwm=0, partition_lsns=None, retry=None, first_index=0, counts=None, commit_ts=111):
    """(pending queues, the new hwm, what went out full, the partition LSNs after)."""
    pending: dict[int, list] = {}
    sent: list[tuple[int, list]] = []
    lsns = {} if partition_lsns is None else partition_lsns
    new_hwm = queue_txn_events(
        txn,
        LOG,
        commit_ts,
        SOURCE,
        lsns,
        hwm,
        retry,
        pending,
        lambda p, events: sent.append((p, list(events))),
        first_index,
        counts,
    )
    return pending, new_hwm, sent, lsns


def _all(pending) -> list:
    return sorted((e for queue in pending.values() for e in queue), key=lambda e: e.lsn)


def test_each_row_gets_its_lsn_partition_index_and_the_transactions_fields():
    txn = Txn("0-1-42", False, [_inserts(1, 2, 3, end_pos=500), _inserts(4, 5, end_pos=900)], rows=5)
    pending, hwm, sent, _ = _queue(txn)
    events = _all(pending)
    assert sent == []
    assert [split_lsn(e.lsn) for e in events] == [(7, 500, 0), (7, 500, 1), (7, 500, 2), (7, 900, 0), (7, 900, 1)]
    assert [e.row_index for e in events] == [0, 1, 2, 3, 4], "the transaction's rows counted across rows events"
    assert {e.row_count for e in events} == {5}
    assert {(e.txn_id, e.commit_ts, e.source_zone, e.is_retry) for e in events} == {("0-1-42", 111, "a", False)}
    for e in events:
        assert e.partition == partition_of("tenants", pk_text(e.pk), PARTITIONS)
        assert e in pending[e.partition]
        assert e.pk == {"tenant_id": e.new["tenant_id"]} and e.op == INSERT and e.old is None
    assert hwm == make_lsn(7, 900, 1)


def test_prev_lsn_chains_each_partition_across_transactions():
    lsns: dict[int, int] = {}
    first, _, _, _ = _queue(Txn("t1", False, [_inserts(*range(1, 21), end_pos=100)], rows=20), partition_lsns=lsns)
    second, _, _, _ = _queue(Txn("t2", False, [_inserts(*range(21, 41), end_pos=200)], rows=20), partition_lsns=lsns)
    for p in range(PARTITIONS):
        chain = first.get(p, []) + second.get(p, [])
        assert chain, f"partition {p} got no row of 40"
        assert chain[0].prev_lsn == 0
        assert [e.prev_lsn for e in chain[1:]] == [e.lsn for e in chain[:-1]]
        assert lsns[p] == chain[-1].lsn


def test_a_chain_goes_on_from_the_lsns_it_is_given():
    txn = Txn("t", False, [_inserts(*range(1, 9))], rows=8)
    pending, _, _, _ = _queue(txn, partition_lsns={p: 1000 + p for p in range(PARTITIONS)})
    for p, queue in pending.items():
        assert queue[0].prev_lsn == 1000 + p


def test_events_at_or_below_the_hwm_are_retries_and_the_hwm_only_grows():
    txn = Txn("t", False, [_inserts(1, 2, 3, 4, end_pos=500)], rows=4)
    hwm = make_lsn(7, 500, 1)
    pending, new_hwm, _, _ = _queue(txn, hwm=hwm)
    assert {e.row_index: e.is_retry for e in _all(pending)} == {0: True, 1: True, 2: False, 3: False}
    assert new_hwm == make_lsn(7, 500, 3)
    _, kept, _, _ = _queue(txn, hwm=make_lsn(9, 0, 0))
    assert kept == make_lsn(9, 0, 0), "a re-read below the hwm leaves it where it was"


def test_a_retry_goes_out_only_in_the_asked_partitions_but_keeps_its_place_in_every_chain():
    tenants = range(1, 41)
    txn = Txn("t", False, [_inserts(*tenants, end_pos=500)], rows=40)
    everything, _, _, _ = _queue(txn)
    assert set(everything) == set(range(PARTITIONS))
    asked = {0, 2}
    counts: dict[int, int] = {}
    lsns: dict[int, int] = {}
    pending, _, _, _ = _queue(txn, hwm=make_lsn(7, 500, 40), retry=asked, counts=counts, partition_lsns=lsns)
    assert set(pending) == asked & set(everything)
    for p in pending:
        assert pending[p] == [msgspec.structs.replace(e, is_retry=True) for e in everything[p]]
    # the partitions left out still advanced: their chain and count include the skipped rows
    assert lsns == {p: queue[-1].lsn for p, queue in everything.items()}
    assert counts == {p: len(queue) for p, queue in everything.items()}


def test_partition_counts_add_to_what_they_held():
    counts = {0: 5, 1: 5, 2: 5, 3: 5}
    txn = Txn("t", False, [_inserts(*range(1, 13))], rows=12)
    pending, _, _, _ = _queue(txn, counts=counts)
    assert counts == {p: 5 + len(pending.get(p, [])) for p in range(PARTITIONS)}


def test_first_index_and_the_total_of_a_streamed_large_transaction():
    txn = Txn("big", False, [_inserts(1, 2, 3, end_pos=800)], rows=10_000)
    pending, _, _, _ = _queue(txn, first_index=4_000)
    events = _all(pending)
    assert [e.row_index for e in events] == [4_000, 4_001, 4_002]
    assert {e.row_count for e in events} == {10_000}
    assert [split_lsn(e.lsn)[2] for e in events] == [0, 1, 2], "the LSN counts rows within the rows event"


def test_a_delete_outranks_the_deleted_row_and_origin_falls_back_to_the_zone():
    rows = [(_row(1, version=7, origin=3), None), (_row(2, version=4, origin=None), None)]
    txn = Txn("t", False, [("tenants", ["tenant_id"], DELETE, rows, 600, True)], rows=2)
    events = _all(_queue(txn)[0])
    assert [(e.op, e.version, e.origin_zone, e.new) for e in events] == [(DELETE, 8, 3, None), (DELETE, 5, 1, None)]
    assert events[0].old == rows[0][0]


def test_an_update_carries_both_images_and_the_new_version():
    before, after = _row(1, version=2, origin=2), _row(1, version=3, origin=2, name="renamed")
    txn = Txn("t", False, [("tenants", ["tenant_id"], UPDATE, [(before, after)], 600, True)], rows=1)
    (event,) = _all(_queue(txn)[0])
    assert (event.old, event.new, event.version, event.origin_zone) == (before, after, 3, 2)


def test_a_composite_or_non_integer_key_is_hashed_by_its_key_text():
    rows = [(None, {"region": "eu", "order_id": n, "_zs_version": 1}) for n in range(10)]
    txn = Txn("t", False, [("orders", ["region", "order_id"], INSERT, rows, 700, True)], rows=10)
    for e in _all(_queue(txn)[0]):
        assert e.pk == {"region": "eu", "order_id": e.new["order_id"]}
        assert e.partition == partition_of("orders", pk_text(e.pk), PARTITIONS)
    rows = [(None, {"code": f"k{n}", "_zs_version": 1}) for n in range(10)]
    txn = Txn("t", False, [("codes", ["code"], INSERT, rows, 700, True)], rows=10)
    for e in _all(_queue(txn)[0]):
        assert e.partition == partition_of("codes", f'["{e.pk["code"]}"]', PARTITIONS)


def test_images_that_are_not_plain_json_are_encoded():
    when = dt.datetime(2024, 2, 29, 12, 30, 1, 250000)
    image = {"tenant_id": 1, "created": when, "_zs_version": 1}
    txn = Txn("t", False, [("tenants", ["tenant_id"], INSERT, [(None, image)], 700, False)], rows=1)
    (event,) = _all(_queue(txn)[0])
    assert event.new == encode_row(image) != image
    assert decode_row(event.new)["created"] == when


def test_a_queue_that_reaches_the_message_size_goes_out_at_once():
    n = MAX_MESSAGE_EVENTS * 2 + 7
    # a source of one partition: every row lands in partition 0
    txn = Txn("t", False, [_inserts(*range(1, n + 1))], rows=n)
    pending: dict[int, list] = {}
    sent: list[tuple[int, list]] = []
    queue_txn_events(txn, LOG, 1, ("a", 1, 1), {}, 0, None, pending, lambda p, q: sent.append((p, list(q))))
    assert [(p, len(q)) for p, q in sent] == [(0, MAX_MESSAGE_EVENTS), (0, MAX_MESSAGE_EVENTS)]
    assert len(pending[0]) == 7
    chain = [e for _, q in sent for e in q] + pending[0]
    assert [e.row_index for e in chain] == list(range(n)), "nothing lost or reordered across the messages"


def test_a_row_index_past_what_an_lsn_holds_is_refused():
    rows = [(None, _row(t)) for t in range(MAX_ROWS_PER_EVENT + 2)]
    txn = Txn("t", False, [("tenants", ["tenant_id"], INSERT, rows, 700, True)], rows=len(rows))
    with pytest.raises(EventError, match="row index"):
        _queue(txn)


def test_close_txn_marks_the_last_row_of_each_partition_only():
    txn = Txn("t", False, [_inserts(*range(1, 21))], rows=20)
    pending, _, _, _ = _queue(txn)
    close_txn(pending)
    for queue in pending.values():
        assert [e.txn_end for e in queue] == [False] * (len(queue) - 1) + [True]
    close_txn(pending)  # again: nothing changes
    assert sum(e.txn_end for q in pending.values() for e in q) == len(pending)
