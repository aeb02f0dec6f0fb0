"""What a failover leans on, without a server (docs/failover.md): GTID states read and
compared (capture/gtid.py), a pass's checkpoints carrying the GTID state of their position
and never keyed below their segment's floor, LSNs of a segment shifted by its file offset,
and a replicator that refuses a different server answering at its primary's address.
The promotion itself against real servers: e2e/test_failover_checks.py,
e2e/test_zone_failover.py."""

from __future__ import annotations

import pytest

from tests.unit.test_capture_pass import FILE, feed, gtid, rows, state, xid
from zonesync.capture import gtid as gtids
from zonesync.capture import segments
from zonesync.capture.binlog_stream import LeanWriteRowsEvent
from zonesync.capture.checkpoints import Checkpoint
from zonesync.capture.faults import PrimaryChanged
from zonesync.capture.replicator import Replicator, ReplicatorError
from zonesync.capture.source import SourceDB
from zonesync.events import file_number, make_lsn, split_lsn
from zonesync.meta.db import MetaConfig

pytestmark = pytest.mark.unit


@pytest.fixture
def rep() -> Replicator:
    source = SourceDB("127.0.0.1", 1, "root", "")
    source._pks[("zonesync_app", "t")] = ["id"]
    meta = MetaConfig("127.0.0.1", 1, "root", "", "zonesync_meta")
    return Replicator("a", 1, source, meta, server_id=4001, partitions=4, bootstrap=lambda: "broker:1")


def test_gtid_positions_parse_render_and_compare():
    state = gtids.parse("1-11-5,2-12-30")
    assert state == {1: (11, 5), 2: (12, 30)}
    assert gtids.parse("[1-11-5]") == {1: (11, 5)} and gtids.parse("") == {} and gtids.parse(None) == {}
    assert gtids.render(state) == "1-11-5,2-12-30"
    assert gtids.covers_all(state, {1: (11, 4)}) and not gtids.covers_all(state, {2: (12, 31)})
    assert not gtids.covers_all(state, {1: (99, 4)}), "another server's transaction 4 is not this history's"
    held = {(1, 11): 3, (2, 12): 30, (1, 21): 9}  # @@gtid_binlog_state: per domain and server
    assert gtids.missing(held, state) == {1: (3, 5)}, "server 21's own 1-21-9 is not 1-11-5"
    assert gtids.clipped(held, state) == {1: (11, 3), 2: (12, 30)}
    assert gtids._pairs("1-11-3,1-21-9,2-12-30") == held
    with pytest.raises(gtids.GtidError, match="'1-x-5' is not DOMAIN-SERVER-SEQ"):
        gtids.parse("1-x-5")


def test_a_checkpoint_carries_the_gtid_state_of_its_position_not_of_a_transaction_in_flight(rep):
    s = state(rep, gtid_state={0: (1, 4)})
    feed(rep, s, gtid(5, 100), rows(LeanWriteRowsEvent, 200, [1]), xid(231))
    feed(rep, s, gtid(6, 300), rows(LeanWriteRowsEvent, 400, [2]))  # read, not committed yet
    cp = s.checkpoint()
    assert (cp.log_file, cp.log_pos, cp.gtid_pos) == (FILE, 231, "0-1-5"), "the boundary's state: seq 6 not in it"
    feed(rep, s, xid(431))
    assert s.checkpoint().gtid_pos == "0-1-6"


def test_an_unknown_gtid_state_stays_unknown(rep):
    s = state(rep, gtid_state=None)
    feed(rep, s, gtid(5, 100), rows(LeanWriteRowsEvent, 200, [1]), xid(231))
    assert s.checkpoint().gtid_pos is None, "never a state made up from part of the history"


def test_a_segments_lsns_are_shifted_by_its_file_offset_and_its_checkpoints_keyed_above_its_floor(rep):
    floor = make_lsn(9, 0, 0) - 1
    s = state(
        rep, segment=2, lsn_file_offset=6, lsn_floor=floor, partition_lsns={0: make_lsn(8, 500, 0)}, boundary=(FILE, 4)
    )
    assert s.checkpoint().lsn == floor, "before its first event, the segment's checkpoint is keyed at the floor"
    feed(rep, s, gtid(5, 100), rows(LeanWriteRowsEvent, 200, [1]), xid(231))
    (event,) = [ev for q in s.pending.values() for ev in q]
    assert split_lsn(event.lsn) == (file_number(FILE) + 6, 200, 0) and event.lsn > floor
    cp = s.checkpoint()
    assert cp.segment == 2 and cp.lsn == event.lsn


def _meta_segment(monkeypatch, seg):
    monkeypatch.setattr(segments, "current", lambda meta, zone, cur=None: seg)


def test_a_different_server_at_the_primarys_address_is_refused(rep, monkeypatch):
    seg = segments.Segment("a", 0, "127.0.0.1", 1, 1, "binlog.000001", 4)
    _meta_segment(monkeypatch, seg)
    monkeypatch.setattr(SourceDB, "server_id", lambda self: 101)  # a virtual IP moved to the replica
    with pytest.raises(PrimaryChanged, match="zonesync zones set-primary a 127.0.0.1:1"):
        rep._follow_primary(Checkpoint("a", 5, "binlog.000001", 900))


def test_after_a_promotion_the_replicator_reads_the_new_primary(rep, monkeypatch):
    seg = segments.Segment("a", 1, "10.0.0.8", 3307, 101, "binlog.000003", 4, lsn_file_offset=-1)
    _meta_segment(monkeypatch, seg)
    monkeypatch.setattr(SourceDB, "server_id", lambda self: 101)
    assert rep._follow_primary(Checkpoint("a", 5, "binlog.000003", 4, segment=1)) == seg
    assert (rep.source.host, rep.source.port) == ("10.0.0.8", 3307)
    with pytest.raises(ReplicatorError, match="was not mapped onto the new primary"):
        rep._follow_primary(Checkpoint("a", 5, "binlog.000001", 900, segment=0))


def test_each_failover_puts_the_new_segments_lsns_above_every_earlier_one():
    from zonesync.capture.failover import _continued, next_floor

    cp = Checkpoint("a", make_lsn(3, 900, 0), "binlog.000003", 950, {0: make_lsn(3, 900, 0), 1: make_lsn(2, 40, 1)},
                    make_lsn(3, 900, 0), {0: 10, 1: 4})  # fmt: skip
    lsns, counts, top = _continued(cp, {1: (2, make_lsn(4, 12, 0))})  # two events of partition 1 past it
    assert lsns == {0: make_lsn(3, 900, 0), 1: make_lsn(4, 12, 0)} and counts == {0: 10, 1: 6}
    base, floor = next_floor(top)
    assert (base, floor) == (5, make_lsn(5, 0, 0) - 1) and floor > top
    again, higher = next_floor(floor)  # a second failover before the first segment published anything
    assert higher > floor and again == 6
