"""Gates (zonesync.switch.gate) against the real meta store: a step started early
waits for its predecessor's stamp, and never runs when the predecessor cannot
complete. The predecessor's orchestrator state is a scripted function here; the
DAG tests drive the same gates through Airflow's own task states."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from zonesync.switch.gate import GateClosed, GateNotReady, wait_gate
from zonesync.switch.plan import SwitchRequest
from zonesync.switch.store import ROLLED_BACK, SwitchStore

pytestmark = pytest.mark.integration


@pytest.fixture
def switch(meta):
    store = SwitchStore(meta)
    run_id = f"gate-{uuid.uuid4().hex[:8]}"
    store.create(run_id, SwitchRequest.parse("0-9", "a", "b", "gate test"), "test")
    return store, run_id


class States:
    """The predecessor's task states, one per call; the last one repeats."""

    def __init__(self, *states):
        self.states, self.calls = list(states), 0

    def __call__(self):
        self.calls += 1
        return self.states[min(self.calls, len(self.states)) - 1]


def _gate_row(meta, run_id: str, task: str):
    rows, _ = meta.run(
        "SELECT g.passed_at IS NOT NULL, g.left_at IS NOT NULL FROM switch_gates g JOIN switches s "
        "ON s.id = g.switch_id WHERE s.run_id = %s AND g.task = %s",
        (run_id, task),
    )
    return rows[0] if rows else None


def test_a_step_started_early_goes_on_the_moment_the_stamp_lands(switch, meta):
    store, run_id = switch
    store.step_started(store.require(run_id).id, "block")  # block is running
    threading.Timer(0.3, store.stamp_once, (run_id, "block_acked_at")).start()
    states = States("queued")
    started = time.monotonic()
    waited = wait_gate(store, run_id, "reshard", states, grace_s=0.1)
    assert 0.25 <= waited <= time.monotonic() - started < 1.0
    assert states.calls == 0  # meta showed block running: the orchestrator was not asked
    assert _gate_row(meta, run_id, "reshard") == (1, 0)  # passed
    [(task, took, state)] = store.gates(store.require(run_id).id)  # what `zonesync switch status` shows
    assert task == "reshard" and state == "passed" and 0.2 <= took < 1.0


def test_a_predecessor_at_its_own_gate_counts_as_started(switch):
    store, run_id = switch
    sw_id = store.require(run_id).id
    store.meta.run("INSERT INTO switch_gates (switch_id, task) VALUES (%s, 'reshard')", (sw_id,))
    threading.Timer(0.6, store.stamp_once, (run_id, "resharding_at")).start()
    states = States("scheduled")  # would send the step away if it were asked
    assert wait_gate(store, run_id, "sync_position", states, grace_s=0.1) >= 0.55
    assert states.calls == 0


def test_a_predecessor_that_has_not_started_sends_the_step_away(switch, meta):
    store, run_id = switch
    for state in (None, "scheduled", "up_for_reschedule"):
        started = time.monotonic()
        with pytest.raises(GateNotReady, match="block"):
            wait_gate(store, run_id, "reshard", States(state), grace_s=0.2)
        assert 0.2 <= time.monotonic() - started < 1.0  # asked once the grace was over
    assert _gate_row(meta, run_id, "reshard") == (0, 1)  # left without passing: not a started task


def test_a_failed_attempt_in_meta_makes_the_gate_ask_at_once(switch):
    store, run_id = switch
    sw_id = store.require(run_id).id
    store.step_started(sw_id, "block")
    threading.Timer(0.3, store.step_finished, (sw_id, "block", "failed", "AckTimeout")).start()
    started = time.monotonic()
    # as in Airflow: the step records its failure before the task ends, so the first answer is "running"
    states = States("running", "failed")
    with pytest.raises(GateClosed, match="block ended failed"):
        wait_gate(store, run_id, "reshard", states, grace_s=0.3, state_every_s=600)
    assert time.monotonic() - started < 2.0 and states.calls == 2


def test_a_predecessor_retrying_or_deferred_is_waited_for(switch):
    store, run_id = switch
    threading.Timer(0.4, store.stamp_once, (run_id, "synced_at")).start()
    states = States("running", "up_for_retry", "queued", "running")
    assert wait_gate(store, run_id, "activate", states, grace_s=0.05, state_every_s=0.05) >= 0.35
    assert states.calls >= 3


def test_a_deferred_predecessor_sends_the_step_away_for_longer(switch):
    store, run_id = switch
    with pytest.raises(GateNotReady, match="deferred") as refused:
        wait_gate(store, run_id, "activate", States("deferred"), grace_s=0.05)
    assert refused.value.retry_in_s > 1.0  # wait_sync defers only when the wait is long


@pytest.mark.parametrize("state", ["failed", "upstream_failed", "skipped"])
def test_a_predecessor_that_ended_without_its_stamp_closes_the_gate(switch, state):
    store, run_id = switch
    with pytest.raises(GateClosed, match=f"block ended {state} without block_acked_at"):
        wait_gate(store, run_id, "reshard", States("running", state), grace_s=0.05, state_every_s=0.05)


def test_a_stamp_written_just_before_the_predecessor_ended_opens_the_gate(switch):
    store, run_id = switch
    ended = States("success")

    def stamp_then_end():
        store.stamp_once(run_id, "synced_at")
        return ended()

    assert wait_gate(store, run_id, "activate", stamp_then_end, grace_s=0) < 0.5
    assert ended.calls == 1


def test_a_rollback_closes_a_gate_even_when_the_stamp_is_there(switch):
    store, run_id = switch
    store.stamp_once(run_id, "synced_at")  # e.g. a wait_sync that timed out as the zones caught up
    store.claim_phase(run_id, "rolling_back")
    with pytest.raises(GateClosed, match="rolling_back"):
        wait_gate(store, run_id, "activate", States("failed"))


def test_a_rollback_closes_every_gate_even_while_the_predecessor_runs(switch):
    store, run_id = switch
    threading.Timer(0.2, store.claim_phase, (run_id, "rolling_back")).start()
    with pytest.raises(GateClosed, match="rolling_back"):
        wait_gate(store, run_id, "activate", States("deferred"))
    store.finish(run_id, ROLLED_BACK, "test")
    with pytest.raises(GateClosed, match="rolled_back"):
        wait_gate(store, run_id, "reshard", States("running"))


def test_steps_outside_the_window_have_no_gate(switch):
    store, run_id = switch
    states = States("scheduled")
    assert wait_gate(store, run_id, "block", states) == 0.0 and states.calls == 0
