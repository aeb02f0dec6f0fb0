"""Seconds behind (apply/lag_report.py, issue 17): the age of the oldest event not yet
applied, 0 when nothing is pending; never the time since the last applied event, so a
partition idle for an hour that receives one event is not an hour behind."""

from __future__ import annotations

import random

import pytest

from tests.support.events import change_event
from tests.support.kafka import FakeMessage
from zonesync.apply.loop.lag_report import Backlog, message_time, seconds_behind
from zonesync.events import encode_message

pytestmark = pytest.mark.unit

HOUR = 3600.0


def test_nothing_pending_is_zero_behind():
    assert seconds_behind(now=HOUR, applied_lsn=10, read=[], next_offset=5, high=5, seen=[]) == 0.0
    # messages read whose events are all applied (a duplicate, a replay) are not pending
    assert seconds_behind(HOUR, 10, [(10, 1.0), (7, 2.0)], 5, 5, []) == 0.0
    # a watermark seen once above offsets that have all been read since proves nothing
    assert seconds_behind(HOUR, 10, [], 5, 5, [(5, 1.0)]) == 0.0


def test_the_oldest_pending_message_read_gives_the_age():
    # idle for an hour (the last applied event is an hour old), then one event 15 ms ago
    assert seconds_behind(HOUR, 10, [(20, HOUR - 0.015)], 6, 6, []) == pytest.approx(0.015)
    assert seconds_behind(HOUR, 10, [(20, HOUR - 3), (30, HOUR - 5), (40, HOUR - 1)], 8, 8, []) == 5.0
    assert seconds_behind(HOUR, 20, [(20, HOUR - 3), (30, HOUR - 2)], 8, 8, []) == 2.0, "the applied one left"


def test_messages_not_read_yet_are_as_old_as_the_first_watermark_seen_above_them():
    # offsets 5.. not read; watermark 7 first seen 4 s ago, 9 a second ago
    assert seconds_behind(HOUR, 10, [], 5, 9, [(7, HOUR - 4), (9, HOUR - 1)]) == 4.0
    # offsets 7 and 8 only: the watermark 7 (offsets up to 6) says nothing of them
    assert seconds_behind(HOUR, 10, [], 7, 9, [(7, HOUR - 4), (9, HOUR - 1)]) == 1.0
    # pending messages read and messages not read: the older of the two bounds
    assert seconds_behind(HOUR, 10, [(20, HOUR - 2)], 6, 9, [(9, HOUR - 3)]) == 3.0
    assert seconds_behind(HOUR, 10, [(20, HOUR - 8)], 6, 9, [(9, HOUR - 3)]) == 8.0
    # messages past the read ones, never seen in a watermark yet: nothing known of them
    assert seconds_behind(HOUR, 10, [], 5, 9, []) == 0.0


def test_never_negative_on_a_clock_ahead():
    assert seconds_behind(HOUR, 10, [(20, HOUR + 2)], 6, 6, []) == 0.0


def test_an_idle_partition_then_one_event_reports_the_events_age():
    """The issue's case: idle 225 s, one event, applied within 15 ms; reported every second."""
    b = Backlog(applied_lsn=100, next_offset=42)
    b.observe(42, now=1000.0)
    assert b.seconds(1000.0, 42) == 0.0
    # 225 s of nothing
    for t in range(1001, 1226):
        b.observe(42, float(t))
        assert b.seconds(float(t), 42) == 0.0
    # the event reaches the broker at 1225.2; the fetch brings it (and the watermark 43)
    b.on_read(42, 110, 1225.2)
    b.observe(43, 1225.21)
    assert b.seconds(1225.21, 43) == pytest.approx(0.01), "its age, not the time since the last applied event"
    b.on_commit(110)
    assert b.seconds(1225.215, 43) == 0.0
    b.observe(43, 1226.0)
    assert b.seconds(1226.0, 43) == 0.0 and not b.read and not b.seen


def test_a_watermark_seen_before_the_message_was_read_bounds_its_age():
    """The fetch's watermark came in before the loop took the message: the report knows it
    exists, not its timestamp, and may say no more than that it existed when seen."""
    b = Backlog(applied_lsn=100, next_offset=42)
    b.observe(42, 1000.0)
    b.observe(43, 1225.3)  # after an hour idle, offset 42 exists
    assert b.seconds(1225.3, 43) == 0.0
    assert b.seconds(1225.5, 43) == pytest.approx(0.2)
    b.on_read(42, 110, 1225.25)
    b.observe(43, 1225.6)
    assert b.seconds(1225.6, 43) == pytest.approx(0.35), "now from its own timestamp"
    b.on_commit(110)
    assert b.seconds(1225.7, 43) == 0.0


def test_a_real_backlog_keeps_growing_while_it_is_worked_off():
    """Messages one a second for a minute while the applier is down; it starts at 60 and takes
    one message a second (slower than they come): the figure grows, and never exceeds the
    true age of the oldest event not applied."""
    b = Backlog(applied_lsn=0, next_offset=0)
    published = {n: float(n) for n in range(600)}  # offset -> timestamp; LSN = offset + 1
    read = 0
    figures = []
    for now in range(60, 120):
        high = now + 1  # the messages at the broker by now
        b.observe(high, float(now))
        figure = b.seconds(float(now), high)
        oldest = min(n for n in published if n + 1 > b.applied_lsn)
        assert figure <= now - published[oldest] + 1e-9
        figures.append(figure)
        # read the next message and apply it
        b.on_read(read, read + 1, published[read])
        b.on_commit(read + 1)
        read += 1
    assert figures[0] == 0.0, "what happened before the applier started is not known"
    assert all(later > earlier for earlier, later in zip(figures[1:], figures[2:], strict=False)), figures
    assert figures[-1] >= 50.0


def test_a_held_or_gap_dropped_message_stays_pending_until_its_events_are_applied():
    b = Backlog(applied_lsn=100, next_offset=10)
    b.on_read(10, 130, 50.0)  # a transaction's rows waiting for its end; or events after a gap
    b.on_read(11, 140, 51.0)
    b.on_commit(120)  # part of the message applied (cut inside it)
    assert b.seconds(60.0, 12) == 10.0
    b.on_read(12, 150, 59.0)  # the resend, later in the log
    b.on_commit(150)
    assert b.seconds(60.0, 13) == 0.0 and not b.read


def test_duplicates_of_events_in_flight_leave_once_those_commit():
    b = Backlog(applied_lsn=100, next_offset=10)
    b.on_read(10, 120, 50.0)  # handed to a worker, not committed
    b.on_read(11, 120, 55.0)  # the same events again (a replicator's restart)
    b.on_read(12, 95, 56.0)  # events applied long ago: not pending
    assert list(b.read) == [(120, 50.0), (120, 55.0)]
    b.on_commit(120)
    assert b.seconds(60.0, 13) == 0.0 and not b.read


def test_the_estimate_never_exceeds_the_true_age():
    """Random publishing, fetching, reading and applying, reports at random moments: the
    figure is never above the age of the oldest message whose events are not applied."""
    rng = random.Random(17)
    for _ in range(200):
        b = Backlog(applied_lsn=0, next_offset=0)
        log: list[float] = []  # offset -> timestamp (LSN = offset + 1)
        fetched_high = 0  # the watermark the consumer's last fetch brought
        read = applied = 0  # next offset to read, offsets applied
        now = 0.0
        for _ in range(300):
            now += rng.choice([0.001, 0.01, 0.5, 3.0, 60.0])
            step = rng.random()
            if step < 0.3:
                log.append(now)  # the replicator publishes
            elif step < 0.5:
                fetched_high = len(log)  # a fetch returns (the watermark, not yet the messages)
            elif step < 0.7 and read < fetched_high:
                b.on_read(read, read + 1, log[read])
                read += 1
            elif step < 0.85 and applied < read:
                applied = rng.randint(applied + 1, read)
                b.on_commit(applied)
            else:
                b.observe(fetched_high, now)
                figure = b.seconds(now, fetched_high)
                true_age = now - log[applied] if applied < len(log) else 0.0
                assert figure <= true_age + 1e-9, (figure, true_age)
                if applied == len(log):
                    assert figure == 0.0


def test_a_message_is_timed_by_kafka_else_by_its_first_events_commit():
    first = change_event(lsn=20, op="insert", table="t", pk={"id": 1}, version=1, commit_ts=1_700_000_000)
    value = encode_message([first])
    assert message_time(FakeMessage(0, 0, value, (1, 1_700_000_001_250)), first) == 1_700_000_001.25
    assert message_time(FakeMessage(0, 0, value, (0, -1)), first) == 1_700_000_000.0, "no timestamp: the commit time"


class _Consumer:
    """The consumer's cached high watermarks, as the lag report reads them."""

    def __init__(self, high: dict[int, int]):
        self.high = high

    def get_watermark_offsets(self, tp, cached=False):
        assert cached, "the lag report never asks the broker"
        return 0, self.high.get(tp.partition, -1001)


def test_the_applier_warns_for_a_backlog_not_for_one_event_after_a_long_idle(monkeypatch):
    """Through the applier's own bookkeeping (_take, rounds.committed, lag.figures): partition 0
    idle for an hour gets one event; partition 1 holds a message a minute old."""
    import zonesync.apply.loop.lag_report as lag_report
    from zonesync.apply.loop.applier import Applier
    from zonesync.apply.loop.continuity import PartitionState
    from zonesync.apply.loop.settings import ApplierSettings

    now = 1_800_000_000.0
    monkeypatch.setattr(lag_report.time, "time", lambda: now)
    settings = ApplierSettings(lag_warning_s=30.0)
    applier = Applier(
        "b", ["a"], writer_factory=None, meta=None, partitions=2, settings=settings, bootstrap=lambda: "unused"
    )
    warned = []
    applier.lag.alert = lambda kind, detail: warned.append((kind, detail))
    written = []
    applier.lag.write = written.append
    for p, (lsn, offset) in enumerate([(100, 41), (200, 9)]):
        applier.book.state[("a", p)] = PartitionState(applied_lsn=lsn)
        applier.book.offsets[("a", p)] = offset
        applier.book.backlog[("a", p)] = Backlog(lsn, offset + 1)

    def event(p, lsn, prev):
        image = {"id": lsn, "_zs_origin": 1, "_zs_version": 1}
        return change_event(lsn=lsn, prev_lsn=prev, op="insert", table="t", pk={"id": lsn}, new=image, version=1,
                            partition=p, commit_ts=int(now - HOUR))  # fmt: skip

    fresh = FakeMessage(0, 42, encode_message([event(0, 110, 100)]), (1, int((now - 0.015) * 1000)))
    old = FakeMessage(1, 10, encode_message([event(1, 210, 200)]), (1, int((now - 60) * 1000)))
    chains: dict = {}
    applier._take([fresh, old], chains, None, budget=100)
    consumer = _Consumer({0: 43, 1: 11})
    applier.lag.report(consumer)
    [rows] = written
    by_partition = {r[2]: r for r in rows}
    assert by_partition[0][4:] == (1, pytest.approx(0.015, abs=0.001)), "one event 15 ms old: not an hour behind"
    assert by_partition[1][4:] == (1, 60.0)
    assert [(k, d["partition"], d["behind_seconds"]) for k, d in warned] == [("lag_warning", 1, 60.0)]

    # the loop takes the ages before it hands the round out, and reports once it is applied
    pending = applier.lag.pending_ages()
    applier.rounds.committed([[(key, chain) for key, chain in chains.items()]])
    now += 0.01
    rows = applier.lag.figures(consumer, pending)
    assert [r[4:] for r in rows] == [(0, pytest.approx(0.015, abs=0.001)), (0, 60.0)], "as before the round"
    now += 1.0
    assert applier.lag.pending_ages() == {}
    rows = applier.lag.figures(consumer, applier.lag.pending_ages())
    assert [r[4:] for r in rows] == [(0, 0.0), (0, 0.0)], "applied: nothing behind"
