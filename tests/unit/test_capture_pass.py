"""One pass of the replicator (capture/replicator.py, capture/pass_state.py), event by event.

Its handlers (one per event kind, as Vitess's vplayer has) are driven here with the lean
stream's own event classes built from headers, against a pass state whose delivery only
records: which handler an event class gets, what a transaction queues at its commit, what
an applier's transaction and a DDL leave, how a large transaction is counted, then read
again and streamed, and what a checkpoint of the pass holds. The loop and the tick against
a real binlog and broker: integration/mesh/test_replication.py and the capture tests.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from zonesync.capture import replicator as replicator_mod
from zonesync.capture.binlog_stream import (
    Header,
    LeanDeleteRowsEvent,
    LeanGtidEvent,
    LeanUpdateRowsEvent,
    LeanWriteRowsEvent,
    LeanXidEvent,
)
from zonesync.capture.pass_state import PassState
from zonesync.capture.publish import Txn
from zonesync.capture.replicator import _ENDED, _NEXT, Replicator, ReplicatorError, _handler_of
from zonesync.capture.source import SourceDB
from zonesync.events import DELETE, INSERT, UPDATE, make_lsn
from zonesync.meta.db import MetaConfig

pytestmark = pytest.mark.unit

FILE = "binlog.000003"
TABLE = SimpleNamespace(schema="zonesync_app", table="t", columns=[])
APPLIER_FLAG = 0x8000  # skip_replication: an applier wrote it


class FakeDelivery:
    """Records what the pass gives it; the broker acks nothing."""

    def __init__(self):
        self.produced: list[tuple[int, list]] = []
        self.noted: list = []
        self.drained = 0
        self.errors: list = []
        self.in_flight = 0
        self.published = 0
        self.producer = SimpleNamespace(flush=lambda timeout=None: 0, poll=lambda timeout: 0)

    def produce(self, partition, events):
        self.produced.append((partition, list(events)))

    def flush(self, pending, keep_last=False):
        for partition, queue in list(pending.items()):
            self.produce(partition, queue)
        pending.clear()

    def note(self, pending, checkpoint, keep_last=False):
        self.noted.append(checkpoint)

    def drain(self, timeout=5.0):
        self.drained += 1

    def acked_checkpoint(self):
        return None


@pytest.fixture
def rep() -> Replicator:
    source = SourceDB("127.0.0.1", 1, "root", "")
    source._pks[("zonesync_app", "t")] = ["id"]  # (asked once per table: never connects here)
    meta = MetaConfig("127.0.0.1", 1, "root", "", "zonesync_meta")
    return Replicator("a", 1, source, meta, server_id=4001, partitions=4, bootstrap=lambda: "broker:1")


def state(rep: Replicator, delivery: FakeDelivery | None = None, **kw) -> PassState:
    delivery = delivery or FakeDelivery()
    rep._delivery = delivery
    fields = dict(partition_lsns={}, partition_counts={}, hwm=0, resend_ids=[], retry_partitions=None, retry_until=0)
    fields.update(kw)
    return PassState(rep.zone, (rep.zone, rep.zone_id, rep.partitions), delivery, "broker:1", **fields)


def header(log_pos: int, flags: int = 0, timestamp: int = 1_700_000_000) -> Header:
    return Header(timestamp, 0, 1, 0, log_pos, flags)


def gtid(seq: int, log_pos: int, flags: int = 0) -> LeanGtidEvent:
    return LeanGtidEvent(header(log_pos, flags), seq, 0, 0)


def rows(kind, log_pos: int, ids, flags: int = 0):
    images = {
        LeanWriteRowsEvent: lambda i: (None, {"id": i, "v": "x"}),
        LeanUpdateRowsEvent: lambda i: ({"id": i, "v": "x"}, {"id": i, "v": "y"}),
        LeanDeleteRowsEvent: lambda i: ({"id": i, "v": "x"}, None),
    }[kind]
    return kind(header(log_pos, flags), TABLE, 7, [images(i) for i in ids], plain=True)


def xid(log_pos: int, timestamp: int = 1_700_000_000) -> LeanXidEvent:
    return LeanXidEvent(header(log_pos, timestamp=timestamp), 99)


class Query(QueryEvent):
    def __init__(self, query: str, log_pos: int):
        self.packet, self.query, self.timestamp = header(log_pos), query, 1_700_000_000
        self.schema = b"zonesync_app"  # the session's database when it ran


def feed(rep: Replicator, s: PassState, *events) -> list:
    """Each event to its handler, as _read does; what each handler returned."""
    return [_handler_of(type(ev))(rep, s, ev, FILE) for ev in events]


def queued(s: PassState) -> list:
    return sorted((ev for queue in s.pending.values() for ev in queue), key=lambda ev: ev.lsn)


def test_each_event_class_has_the_handler_isinstance_would_pick():
    picks = {
        MariadbGtidEvent: Replicator._on_gtid,
        GtidEvent: Replicator._on_gtid,
        LeanGtidEvent: Replicator._on_gtid,
        WriteRowsEvent: Replicator._on_rows,
        UpdateRowsEvent: Replicator._on_rows,
        DeleteRowsEvent: Replicator._on_rows,
        LeanWriteRowsEvent: Replicator._on_rows,
        LeanUpdateRowsEvent: Replicator._on_rows,
        LeanDeleteRowsEvent: Replicator._on_rows,
        XidEvent: Replicator._on_commit,
        LeanXidEvent: Replicator._on_commit,
        QueryEvent: Replicator._on_query,
        Query: Replicator._on_query,
        RotateEvent: Replicator._on_other,
        HeartbeatLogEvent: Replicator._on_other,
    }
    for kind, handler in picks.items():
        assert _handler_of(kind) is handler, kind.__name__
        assert replicator_mod._HANDLERS[kind] is handler, "found once, then looked up"


def test_a_transaction_is_queued_at_its_commit_and_its_end_is_a_boundary(rep):
    s = state(rep)
    assert feed(rep, s, gtid(5, 100), rows(LeanWriteRowsEvent, 200, [1, 2, 3])) == [None, None]
    assert s.pending == {} and s.txn.rows == 3, "buffered until its commit"
    assert feed(rep, s, xid(231)) == [None]
    events = queued(s)
    assert [ev.lsn for ev in events] == [make_lsn(3, 200, i) for i in range(3)]
    assert {(ev.op, ev.txn_id, ev.row_count, ev.commit_ts) for ev in events} == {(INSERT, "0-1-5", 3, 1_700_000_000)}
    assert all(queue[-1].txn_end for queue in s.pending.values()), "close_txn marked each partition's last row"
    assert s.hwm == events[-1].lsn
    assert (s.txn, s.boundary, s.boundary_dirty) == (None, (FILE, 231), True)
    assert rep.read_at == (FILE, 231, 1_700_000_000)


def test_each_rows_event_kind_gives_its_op(rep):
    s = state(rep)
    feed(rep, s, gtid(6, 100), rows(LeanUpdateRowsEvent, 200, [1]), rows(LeanDeleteRowsEvent, 300, [2]), xid(331))
    by_lsn = {ev.lsn: ev for ev in queued(s)}
    assert by_lsn[make_lsn(3, 200, 0)].op == UPDATE and by_lsn[make_lsn(3, 200, 0)].new == {"id": 1, "v": "y"}
    assert by_lsn[make_lsn(3, 300, 0)].op == DELETE and by_lsn[make_lsn(3, 300, 0)].row_index == 1


def test_an_appliers_transaction_is_never_queued_and_its_rows_skip_the_tick(rep):
    s = state(rep)
    done = feed(rep, s, gtid(7, 100, APPLIER_FLAG), rows(LeanWriteRowsEvent, 200, [1]), xid(231))
    assert done == [None, _NEXT, None]
    assert s.pending == {} and s.hwm == 0
    assert (s.boundary, s.boundary_dirty) == ((FILE, 231), True), "its end is still a boundary"


def test_rows_of_another_schema_are_not_captured(rep):
    s = state(rep)
    other = rows(LeanWriteRowsEvent, 200, [1])
    other.schema = "elsewhere"
    assert feed(rep, s, gtid(8, 100), other, xid(231)) == [None, _NEXT, None]
    assert s.pending == {}


def test_a_ddl_is_a_boundary_a_begin_is_not_and_a_commit_query_commits(rep):
    s = state(rep)
    feed(rep, s, gtid(9, 100), Query("ALTER TABLE t ADD COLUMN w INT", 180))
    assert (s.txn, s.boundary) == (None, (FILE, 180)), "a DDL is its own GTID group, ended with no Xid"
    assert ("zonesync_app", "t") not in rep.source._pks, "the DDL made the replicator forget t's key"
    rep.source._pks[("zonesync_app", "t")] = ["id"]  # (asked again of the zone next: not here)
    feed(rep, s, gtid(8, 182), Query("ALTER TABLE other_schema.t ADD COLUMN w INT", 185))
    assert ("zonesync_app", "t") in rep.source._pks, "DDL on a schema not replicated changes nothing"
    feed(rep, s, gtid(10, 200), Query("BEGIN", 240))
    assert s.txn is not None and s.boundary == (FILE, 185), "BEGIN is inside the transaction"
    feed(rep, s, rows(LeanWriteRowsEvent, 300, [4]), Query(" commit ", 330))
    assert (s.txn, s.boundary) == (None, (FILE, 330)) and len(queued(s)) == 1


def test_a_rows_event_without_a_gtid_is_its_own_transaction(rep):
    s = state(rep)
    feed(rep, s, rows(LeanWriteRowsEvent, 200, [1]), xid(231))
    assert [ev.txn_id for ev in queued(s)] == [f"{FILE}:200"]


def test_a_transaction_past_large_txn_rows_is_counted_then_read_again_streamed(rep):
    rep.large_txn_rows = 3
    first = state(rep)
    feed(rep, first, xid(90))  # a commit before it: the boundary its first read ends at
    done = feed(rep, first, gtid(11, 100), rows(LeanWriteRowsEvent, 200, [1, 2]), rows(LeanWriteRowsEvent, 300, [3, 4]))
    assert done == [None, None, None]
    assert first.txn.counting and first.txn.events == [] and first.txn.rows == 4, "counted, nothing held"
    assert rep.peak_buffered_rows == 2
    assert feed(rep, first, xid(331, timestamp=1_700_000_123)) == [_ENDED]
    assert rep._large_txns == {"0-1-11": (4, 1_700_000_123)}
    assert first.pending == {} and first.delivery.produced == [], "nothing of it was published"
    assert [(cp.log_file, cp.log_pos) for cp in first.delivery.noted] == [(FILE, 90)]
    assert first.delivery.drained == 1

    again = state(rep)  # the next pass reads it again, from the commit before it
    feed(rep, again, gtid(11, 100), rows(LeanWriteRowsEvent, 200, [1, 2]))
    assert again.streaming and len(queued(again)) == 2, "queued as it is read, its size known"
    feed(rep, again, rows(LeanWriteRowsEvent, 300, [3, 4]), xid(331, timestamp=1_700_000_123))
    events = queued(again)
    assert [ev.row_index for ev in events] == [0, 1, 2, 3]
    assert {(ev.row_count, ev.commit_ts) for ev in events} == {(4, 1_700_000_123)}
    assert rep._large_txns == {} and again.boundary == (FILE, 331)
    assert rep.peak_buffered_rows == 2, "never held whole"


def test_a_large_transaction_read_again_with_other_rows_is_refused(rep):
    rep._large_txns["0-1-12"] = (5, 1_700_000_000)
    s = state(rep)
    feed(rep, s, gtid(12, 100), rows(LeanWriteRowsEvent, 200, [1, 2]))
    with pytest.raises(ReplicatorError, match="read again has 2 rows, not 5"):
        feed(rep, s, xid(231))


def test_a_full_queue_goes_out_but_for_its_last_event():
    delivery = FakeDelivery()
    s = PassState("a", ("a", 1, 4), delivery, "b", {}, {}, 0, [], None, 0)
    s.full(2, ["e1", "e2", "e3"])
    assert delivery.produced == [(2, ["e1", "e2"])]
    assert s.pending == {2: ["e3"]}, "it may end its transaction there: close_txn marks it"


def test_a_checkpoint_is_the_boundary_with_a_copy_of_the_chains():
    s = PassState("a", ("a", 1, 4), FakeDelivery(), "b", {0: 10, 3: 30}, {0: 1, 3: 2}, 35, [], None, 0)
    s.commit_read(FILE, 400)
    cp = s.checkpoint()
    assert (cp.zone, cp.lsn, cp.log_file, cp.log_pos, cp.published_hwm) == ("a", 30, FILE, 400, 35)
    s.partition_lsns[0], s.partition_counts[0] = 50, 9
    assert cp.partition_lsns == {0: 10, 3: 30} and cp.partition_counts == {0: 1, 3: 2}, "a copy, not the live maps"
    uncounted = PassState("a", ("a", 1, 4), FakeDelivery(), "b", {}, None, 0, [], None, 0, boundary=(FILE, 4))
    assert uncounted.checkpoint().partition_counts is None and uncounted.checkpoint().lsn == 0


def test_pending_since_is_when_the_oldest_queued_event_was_queued(rep):
    s = state(rep)
    one = Txn("t1", False, [("t", ["id"], INSERT, [(None, {"id": 1})], 200, True)], 1)
    s.queue(one, FILE, 1)
    since = s.pending_since
    assert since > 0 and s.pending
    s.queue(Txn("t2", False, [("t", ["id"], INSERT, [(None, {"id": 2})], 300, True)], 1), FILE, 2)
    assert s.pending_since == since, "a later transaction does not make the queue younger"
