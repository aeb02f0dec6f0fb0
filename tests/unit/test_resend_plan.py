"""Step 6 of the replicator (capture/resend_plan.py): where a pass starts when appliers
asked for resends. The meta store's request table and the checkpoint store are stood in
for: the rules are the planning's.

- no pending request: the pass starts at the latest checkpoint, no resend;
- pending requests: it rewinds to the oldest of the checkpoints that serve them, and
  re-publishes up to the highest high-water mark among them (and the latest's), for
  the asked partitions;
- a request no checkpoint serves, or whose checkpoint's binlog file is gone, fails at
  once ("needs full copy") and never rewinds the pass.
"""

from __future__ import annotations

import pytest

from zonesync.capture import resend_plan
from zonesync.capture.checkpoints import Checkpoint

pytestmark = pytest.mark.unit

LATEST = Checkpoint("a", lsn=900, log_file="bin.000009", log_pos=400, published_hwm=950)


def _cp(lsn: int, log_file: str = "bin.000005", hwm: int = 0) -> Checkpoint:
    return Checkpoint("a", lsn=lsn, log_file=log_file, log_pos=lsn, published_hwm=hwm)


class _Store:
    """for_resend(partition, from_lsn) answered from a table; the calls remembered."""

    def __init__(self, serves: dict[tuple[int, int], Checkpoint]):
        self.serves = serves
        self.asked: list[tuple[int, int]] = []

    def for_resend(self, partition: int, from_lsn: int):
        self.asked.append((partition, from_lsn))
        return self.serves.get((partition, from_lsn))


@pytest.fixture
def requests(monkeypatch):
    """The pending requests to plan for (id, partition, from LSN), and what the plan
    finished: [(ids, status, detail)]."""
    pending: list[tuple[int, int, int]] = []
    finished: list[tuple[list[int], str, str]] = []
    monkeypatch.setattr(resend_plan.resends, "pending", lambda meta, zone: list(pending))
    monkeypatch.setattr(
        resend_plan.resends, "finish", lambda meta, ids, status, detail: finished.append((ids, status, detail))
    )
    return pending, finished


def _files(*names: str):
    calls: list[int] = []

    def binlog_files():
        calls.append(1)
        return set(names)

    return binlog_files, calls


def test_without_requests_the_pass_starts_at_the_latest_checkpoint_and_lists_no_files(requests):
    files, calls = _files()
    out = resend_plan.plan(None, "a", _Store({}), files, LATEST)
    assert (out.start, out.request_ids, out.partitions, out.until) == (LATEST, [], None, LATEST.published_hwm)
    assert calls == [], "the binlog files are asked for only when a request is pending"


def test_requests_rewind_to_the_oldest_serving_checkpoint_for_the_asked_partitions(requests):
    pending, finished = requests
    older, newer = _cp(100, hwm=300), _cp(400, hwm=1200)
    pending += [(7, 1, 150), (8, 3, 420)]
    store = _Store({(1, 150): older, (3, 420): newer})
    files, _ = _files("bin.000005", "bin.000009")
    out = resend_plan.plan(None, "a", store, files, LATEST)
    assert store.asked == [(1, 150), (3, 420)]
    assert out.start == older
    assert out.request_ids == [7, 8]
    assert out.partitions == {1, 3}
    assert out.until == 1200, "up to the highest high-water mark among them"
    assert finished == []


def test_the_latest_hwm_is_the_floor_of_what_goes_out_again(requests):
    pending, _ = requests
    pending.append((7, 0, 10))
    out = resend_plan.plan(None, "a", _Store({(0, 10): _cp(5, hwm=20)}), _files("bin.000005")[0], LATEST)
    assert out.until == LATEST.published_hwm and out.start.lsn == 5


def test_a_request_no_checkpoint_serves_fails_as_needing_a_full_copy(requests):
    pending, finished = requests
    pending.append((7, 2, 55))
    out = resend_plan.plan(None, "a", _Store({}), _files("bin.000005")[0], LATEST)
    assert (out.start, out.request_ids, out.partitions, out.until) == (LATEST, [], None, LATEST.published_hwm)
    assert finished == [([7], "failed", "no checkpoint re-reads LSN 55: needs full copy")]


def test_a_request_whose_checkpoint_lies_in_a_purged_file_fails_and_never_rewinds(requests):
    pending, finished = requests
    pending.append((7, 2, 55))
    store = _Store({(2, 55): _cp(50, log_file="bin.000002", hwm=80)})
    out = resend_plan.plan(None, "a", store, _files("bin.000005", "bin.000009")[0], LATEST)
    assert out.start == LATEST and out.partitions is None and out.request_ids == []
    assert finished == [([7], "failed", "binlog bin.000002, which re-reads LSN 55, was purged: needs full copy")]


def test_a_failed_request_does_not_hold_back_the_ones_that_can_be_served(requests):
    pending, finished = requests
    served = _cp(300, hwm=1000)
    pending += [(7, 2, 55), (8, 1, 310)]
    store = _Store({(2, 55): _cp(50, log_file="bin.000002"), (1, 310): served})
    out = resend_plan.plan(None, "a", store, _files("bin.000005")[0], LATEST)
    assert [f[0] for f in finished] == [[7]]
    assert out.request_ids == [8] and out.start == served and out.until == 1000
    assert out.partitions == {1}, "the failed request's partition 2 is not re-published"
