"""The gate's waiting rules (switch/gate.py's wait_gate), on a scripted meta store and a
fake clock: no server, no real sleeping. integration/switch/test_switch_gate.py runs the same
gates against the real meta store.

What is checked here is when the orchestrator is asked for the predecessor's state and
what each answer does: never while a predecessor meta shows started runs to its stamp
(before `state_every_s`); after `grace_s` when it has not started; at once when a step
record shows a failed attempt, then again after `grace_s` while the task is not over;
ended without the stamp closes the gate, not started or deferred frees the slot, a stamp
written while the orchestrator was asked still passes; the gate is entered once and left
as passed or not.
"""

from __future__ import annotations

import pytest

from zonesync.switch import gate
from zonesync.switch.gate import GateClosed, GateNotReady, wait_gate

pytestmark = pytest.mark.unit

INF = float("inf")


class Clock:
    """time.monotonic and time.sleep for the gate: sleeping moves the clock."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Meta:
    """The gate's reads, scripted by the clock: the stamp lands at `stamp_at`, the
    predecessor is at its gate from `started_at` to `left_at`, its step record shows a
    failed attempt from `failed_at`; the switch is closed from `closed_at`."""

    def __init__(self, clock, stamp_at=INF, started_at=INF, left_at=INF, failed_at=INF, closed_at=INF):
        self.clock = clock
        self.stamp_at, self.started_at, self.left_at = stamp_at, started_at, left_at
        self.failed_at, self.closed_at = failed_at, closed_at
        self.switch_id = None
        self.entered = 0
        self.left: list[bool] = []
        self.closed = False

    def stamped(self) -> bool:
        self.switch_id = 1
        if self.clock.now >= self.closed_at:
            raise GateClosed("the switch is rolled_back")
        return self.clock.now >= self.stamp_at

    def enter(self) -> None:
        self.entered += 1

    def leave(self, passed: bool) -> None:
        self.left.append(passed)

    def predecessor(self):
        now = self.clock.now
        failed = ("block", "failed", 1, None) if now >= self.failed_at else None
        return self.started_at <= now < self.left_at, failed

    def close(self) -> None:
        self.closed = True


class States:
    """The orchestrator: the predecessor's state by the clock (the last entry at or
    before now), and when it was asked."""

    def __init__(self, clock, script: dict[float, str | None], meta=None, stamp_on_ask=False):
        self.clock, self.script, self.meta, self.stamp_on_ask = clock, script, meta, stamp_on_ask
        self.asked: list[float] = []

    def __call__(self):
        at = self.clock.now - START
        self.asked.append(round(at, 3))
        if self.stamp_on_ask:
            self.meta.stamp_at = self.clock.now  # the predecessor stamps, then ends, while we ask
        return self.script[max(t for t in self.script if t <= at)]


START = 1000.0


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(gate, "time", clock)
    return clock


def _meta(monkeypatch, clock, **script) -> Meta:
    meta = Meta(clock, **{k: START + v for k, v in script.items()})
    monkeypatch.setattr(gate, "_Poller", lambda store, run_id, step: meta)
    return meta


def _wait(states, step="reshard", **kw):
    return wait_gate(None, "run-1", step, states, poll_s=0.01, grace_s=3.0, state_every_s=10.0, **kw)


def test_a_step_without_a_gate_passes_at_once(monkeypatch, clock):
    monkeypatch.setattr(gate, "_Poller", lambda *a: pytest.fail("no gate: meta is not read"))
    assert wait_gate(None, "run-1", "block", lambda: pytest.fail("nor the orchestrator asked")) == 0.0


def test_a_stamp_already_there_passes_without_entering_or_asking(monkeypatch, clock):
    meta = _meta(monkeypatch, clock, stamp_at=0)
    states = States(clock, {0: "running"})
    assert _wait(states) == 0.0
    assert states.asked == [] and meta.entered == 0
    assert meta.left == [True] and meta.closed


def test_a_started_predecessor_is_waited_for_without_asking_the_orchestrator(monkeypatch, clock):
    meta = _meta(monkeypatch, clock, started_at=0, stamp_at=9.5)
    states = States(clock, {0: "running"})
    waited = _wait(states)
    assert 9.5 <= waited < 9.6
    assert states.asked == [], "meta showed it running: the orchestrator was not asked"
    assert meta.entered == 1 and meta.left == [True]


def test_a_long_running_predecessor_is_asked_about_every_state_every_s(monkeypatch, clock):
    _meta(monkeypatch, clock, started_at=0, stamp_at=25)
    states = States(clock, {0: "running"})
    assert 25 <= _wait(states) < 25.1
    assert len(states.asked) == 2 and 10 <= states.asked[0] < 10.2 and 20 <= states.asked[1] < 20.4


def test_a_predecessor_not_started_after_the_grace_frees_the_slot(monkeypatch, clock):
    meta = _meta(monkeypatch, clock)
    states = States(clock, {0: "scheduled"})
    with pytest.raises(GateNotReady, match="has not started") as raised:
        _wait(states)
    assert raised.value.retry_in_s == 1.0
    assert len(states.asked) == 1 and 3.0 <= states.asked[0] < 3.05
    assert meta.entered == 1 and meta.left == [False], "left, not passed: the successor asks sooner"


def test_a_predecessor_that_ended_without_its_stamp_closes_the_gate(monkeypatch, clock):
    meta = _meta(monkeypatch, clock, started_at=0, left_at=1)
    states = States(clock, {0: "running", 2: "success"})
    with pytest.raises(GateClosed, match="reshard not run: block ended success without block_acked_at"):
        _wait(states)
    # it left its gate at 1 s: asked at the grace after that, not at state_every_s
    assert len(states.asked) == 1 and 4.0 <= states.asked[0] < 4.2
    assert meta.left == [False]


def test_a_deferred_predecessor_frees_the_slot_for_longer(monkeypatch, clock):
    _meta(monkeypatch, clock)
    with pytest.raises(GateNotReady, match="deferred") as raised:
        _wait(States(clock, {0: "deferred"}), step="activate")
    assert raised.value.retry_in_s == 5.0


def test_a_failed_attempt_is_asked_about_at_once_then_after_the_grace_while_its_task_runs(monkeypatch, clock):
    meta = _meta(monkeypatch, clock, started_at=0, failed_at=1, stamp_at=5)
    states = States(clock, {0: "running"})
    assert 5 <= _wait(states) < 5.1
    # seen failed at ~1 s: asked at once; the task not over (final or retried?): again at the grace
    assert len(states.asked) == 2
    assert 1.0 <= states.asked[0] < 1.2 and 4.0 <= states.asked[1] < 4.3
    assert meta.left == [True]


def test_a_failed_attempt_being_retried_is_asked_about_once_then_left_to_meta(monkeypatch, clock):
    _meta(monkeypatch, clock, started_at=0, failed_at=1, stamp_at=9)
    states = States(clock, {0: "up_for_retry"})
    assert 9 <= _wait(states) < 9.1
    assert len(states.asked) == 1 and 1.0 <= states.asked[0] < 1.2


def test_a_failed_attempt_that_is_final_closes_the_gate(monkeypatch, clock):
    _meta(monkeypatch, clock, started_at=0, failed_at=1)
    states = States(clock, {0: "failed"})
    with pytest.raises(GateClosed, match="ended failed"):
        _wait(states)
    assert len(states.asked) == 1 and 1.0 <= states.asked[0] < 1.2


def test_a_stamp_written_while_the_orchestrator_was_asked_still_passes(monkeypatch, clock):
    meta = _meta(monkeypatch, clock)
    states = States(clock, {0: "success"}, meta=meta, stamp_on_ask=True)
    assert 3.0 <= _wait(states) < 3.05
    assert meta.left == [True]


def test_a_switch_rolled_back_while_waiting_closes_the_gate(monkeypatch, clock):
    meta = _meta(monkeypatch, clock, started_at=0, closed_at=2)
    with pytest.raises(GateClosed, match="rolled_back"):
        _wait(States(clock, {0: "running"}))
    assert meta.left == [False] and meta.closed
