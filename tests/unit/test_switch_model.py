"""Model-based test of the zone switch protocol: never two writable owners (S000-15..S000-36).

The model: guard instances in zones a, b, c, each running one rules version and
deciding writes with the real GuardState. A coordinator publishes the versions
plan.py derives (current -> blocked -> resharding -> wait_sync -> activated, or
the recorded rules as a rollback before activation) and advances a step only
when every live instance of both zones has acked the newest version or is cut
off from meta. That is more permissive than push_and_wait, which refuses to
publish while an instance is unhealthy: the model goes on without dead and
cut-off instances, so it covers every schedule the real coordinator allows.
A cut-off instance's lease runs out and it refuses all writes (fail closed).

Faults are the seed's cases: pushes lost or delayed (an instance stays on an
older version, never moves back, S000-12), acks lost (3.3, 4.2, 5.3), crashes
at any point (3.2, 3.4, 4.3, 5.2, 5.4), restarts and reconnects that load the
newest version (S000-11). Switches follow one another without waiting for
stragglers, each recording the head it starts from.

After every step: for every ZSID, the instances that would accept a write span
at most one zone. The broken variants at the end show the check can fail.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.unit.test_switch_plan import SPACE, TABLES, ZONES, switch_cases
from zonesync.dal.errors import WriteRefused
from zonesync.dal.state import GuardState
from zonesync.rules.model import ACTIVE, Rule, RuleSet
from zonesync.switch.plan import SwitchRequest, activated, blocked, resharding, rolled_back

pytestmark = pytest.mark.unit

PER_ZONE = 2
INSTANCES = [(zone, n) for zone in ZONES for n in range(PER_ZONE)]
which = st.integers(0, len(INSTANCES) - 1)


@dataclass
class Instance:
    zone: str
    name: str
    held: int = 0  # index of the version it runs
    acked: int = 0  # newest version the coordinator saw it ack
    alive: bool = True
    leased: bool = True


class SwitchProtocol(RuleBasedStateMachine):
    one_step = False  # publish owner=to_zone ACTIVE at once (新老两份规则同时生效)
    use_block = True
    wait_for_acks = True
    fail_closed = True  # an instance with an expired lease refuses writes

    def __init__(self):
        super().__init__()
        self.instances = [Instance(zone, f"{zone}{n}") for zone, n in INSTANCES]
        self.versions: list[RuleSet] = []
        self.states: dict[tuple[int, str], frozenset[int]] = {}

    # -- coordinator ---------------------------------------------------------
    @initialize(case=switch_cases())
    def start(self, case):
        self.versions = [case[0]]
        self.begin(case[1])

    def begin(self, req: SwitchRequest):
        self.req, self.recorded = req, self.versions[-1]
        cur = self.recorded
        staged = [("blocked", blocked(cur, req))] if self.use_block else []
        staged += [("resharding", resharding(cur, req)), ("wait_sync", None), ("activated", activated(cur, req))]
        self.steps = [("activated", activated(cur, req))] if self.one_step else staged
        self.step, self.finished = 0, False

    @property
    def newest(self) -> int:
        return len(self.versions) - 1

    def acked_by_all(self) -> bool:
        affected = {self.req.from_zone, self.req.to_zone}
        return all(i.acked >= self.newest or not i.alive or not i.leased for i in self.instances if i.zone in affected)

    def can_advance(self) -> bool:
        return not self.finished and (not self.wait_for_acks or self.acked_by_all())

    @precondition(lambda self: self.can_advance())
    @rule()
    def advance(self):
        name, rules = self.steps[self.step]
        if rules is not None:
            self.versions.append(rules)
        self.step += 1
        self.finished = name == "activated"

    def can_roll_back(self) -> bool:
        return not self.finished and self.newest > 0 and self.versions[-1] is not self.recorded

    @precondition(lambda self: self.can_roll_back())
    @rule()
    def roll_back(self):
        self.versions.append(rolled_back(self.recorded))
        self.finished = True

    @precondition(lambda self: self.finished)
    @rule(data=st.data())
    def next_switch(self, data):
        head = self.versions[-1]
        owners = sorted({r.zone for r in head.rules if r.status == ACTIVE})
        from_zone = data.draw(st.sampled_from(owners))
        owned = [z for r in head.rules if r.zone == from_zone and r.status == ACTIVE for z in range(r.lo, r.hi + 1)]
        moved = data.draw(st.sets(st.sampled_from(owned), min_size=1))
        to_zone = data.draw(st.sampled_from([z for z in ZONES if z != from_zone]))
        self.begin(SwitchRequest(tuple((z, z) for z in moved), from_zone, to_zone, "next"))

    # -- instances and the network -------------------------------------------
    @rule(i=which, ahead=st.integers(1, 4), ack_lost=st.booleans())
    def deliver(self, i, ahead, ack_lost):
        """A push lands, maybe late (not the newest version); then its ack, unless lost.

        Landing on the version it already runs is a heartbeat: it re-reports a
        version whose first ack was lost. An instance never moves back (S000-12).
        """
        inst = self.instances[i]
        if inst.alive and inst.leased:
            inst.held = min(inst.held + ahead, self.newest)
            if not ack_lost:
                inst.acked = max(inst.acked, inst.held)

    @rule(i=which)
    def crash_or_restart(self, i):
        """A crash stops all writes; a restart loads the newest version before its first write (S000-11)."""
        inst = self.instances[i]
        if inst.alive:
            inst.alive = inst.leased = False
        else:
            inst.alive, inst.leased, inst.held = True, True, self.newest

    @rule(i=which)
    def cut_off_or_reconnect(self, i):
        """Cut off from meta, pushes stop and the lease runs out; reconnected, it polls the newest version."""
        inst = self.instances[i]
        if inst.leased:
            inst.leased = False
        elif inst.alive:
            inst.leased, inst.held = True, self.newest

    @rule()
    def keepalive_round(self):
        """A healthy network: every reachable instance loads the newest version and acks it."""
        for inst in self.instances:
            if inst.alive and inst.leased:
                inst.held = inst.acked = self.newest

    # -- the invariant ---------------------------------------------------------
    def writable(self, version: int, zone: str) -> frozenset[int]:
        """The ZSIDs a guard of `zone` running `version` lets through, asked of the real GuardState."""
        key = (version, zone)
        if key not in self.states:
            state, ok = GuardState(version, zone, self.versions[version]), set()
            for zsid in range(SPACE):
                try:
                    state.decide("t", {"k": zsid})
                    ok.add(zsid)
                except WriteRefused:
                    pass
            self.states[key] = frozenset(ok)
        return self.states[key]

    def accepts(self, inst: Instance, zsid: int) -> bool:
        if not inst.alive or (self.fail_closed and not inst.leased):
            return False
        return zsid in self.writable(inst.held, inst.zone)

    @invariant()
    def single_writer(self):
        for zsid in range(SPACE):
            writers = [i for i in self.instances if self.accepts(i, zsid)]
            zones = {i.zone for i in writers}
            assert len(zones) <= 1, f"ZSID {zsid} writable in zones {sorted(zones)}: " + ", ".join(
                f"{i.name} runs v{i.held}" for i in writers
            )


SEARCH = settings(
    max_examples=500,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TestSwitchProtocol = SwitchProtocol.TestCase
TestSwitchProtocol.settings = SEARCH


class OneStep(SwitchProtocol):
    one_step = True


class NoWaitForAcks(SwitchProtocol):
    wait_for_acks = False


class NotFailClosed(SwitchProtocol):
    """The seed's trust: an instance cut off from meta keeps writing under the rules it has."""

    fail_closed = False


class NoBlock(SwitchProtocol):
    use_block = False


# -- deterministic schedules -----------------------------------------------------------
CASE = (
    RuleSet(0, SPACE - 1, (Rule(0, 7, "a"), Rule(8, SPACE - 1, "b")), TABLES),
    SwitchRequest(((0, 3),), "a", "b", "x"),
)
A0, B0 = 0, PER_ZONE  # instance indexes of a0 and b0


def run(machine_cls, schedule) -> str | None:
    """Replay a schedule, checking the invariant after each step; return the first violation."""
    m = machine_cls()
    m.start(CASE)
    for name, *args in schedule:
        assert name != "advance" or m.can_advance(), f"advance refused at step {m.step}"
        assert name != "roll_back" or m.can_roll_back()
        getattr(m, name)(*args)
        try:
            m.single_writer()
        except AssertionError as exc:
            return str(exc)
    return None


ADVANCE_ALL = [("advance",)] * 4  # publish blocked, resharding, pass wait_sync, publish activated
FAST = [("advance",)] + [("keepalive_round",), ("advance",)] * 3  # the same, everyone acking each step


@pytest.mark.parametrize(
    "variant, schedule",
    [
        pytest.param(NoWaitForAcks, [*ADVANCE_ALL, ("deliver", B0, 3, False)], id="a0 never saw BLOCK, b0 ACTIVE"),
        pytest.param(OneStep, [("advance",), ("deliver", B0, 1, False)], id="S000-15 old and new rules at once"),
        pytest.param(
            NotFailClosed, [("cut_off_or_reconnect", A0), *FAST, ("keepalive_round",)], id="a0 cut off, still writing"
        ),
    ],
)
def test_broken_protocols_give_two_writers_on_a_fixed_schedule(variant, schedule):
    assert "ZSID 0 writable in zones ['a', 'b']" in run(variant, schedule)


def test_the_real_protocol_holds_on_those_schedules():
    assert run(SwitchProtocol, [("advance",), ("deliver", B0, 3, False)]) is None
    m = SwitchProtocol()
    m.start(CASE)
    m.advance()
    assert not m.can_advance()  # nobody acked BLOCK yet
    assert run(SwitchProtocol, [("cut_off_or_reconnect", A0), *FAST, ("cut_off_or_reconnect", A0)]) is None


@pytest.mark.parametrize(
    "case, schedule",
    [
        ("3.1 BLOCK lost for a0, rollback lost for b0", [("advance",), ("deliver", B0, 1, False), ("roll_back",)]),
        ("3.4 a0 acked BLOCK then died", [("advance",), ("keepalive_round",), ("crash_or_restart", A0), ("advance",)]),
        (
            "4.2 b0 applied RESHARDING, ack lost, misses rollback",
            [*FAST[:3], ("deliver", B0, 1, False), ("roll_back",), ("deliver", A0, 3, False)],
        ),
        ("5.1 a0 misses ACTIVE, stays RESHARDING", [*FAST, ("deliver", B0, 1, False), ("keepalive_round",)]),
        ("5.2 a0 dead at activate, restarts", [("crash_or_restart", A0), *FAST, ("crash_or_restart", A0)]),
    ],
)
def test_seed_failure_cases_stay_single_writer(case, schedule):
    assert run(SwitchProtocol, schedule) is None, case


# -- the search finds the broken variants ---------------------------------------------------
# Generation only: the first counterexample is proof enough, shrinking it costs seconds.
FIND = settings(
    SEARCH, max_examples=3000, stateful_step_count=25, derandomize=True, database=None, phases=[Phase.generate]
)


@pytest.mark.parametrize("variant", [OneStep, NoWaitForAcks, NotFailClosed])
def test_the_search_finds_two_writers_in_each_broken_variant(variant):
    with pytest.raises(AssertionError, match="writable in zones"):
        run_state_machine_as_test(variant, settings=FIND)


def test_without_block_resharding_alone_still_keeps_one_writer():
    """BLOCK is not what stops a second writer: RESHARDING refuses writes too.

    What BLOCK buys is that the owner changes only after every instance has
    stopped writing, so anything keyed on the owner (replication's loop filter,
    the applier's ownership checks) never sees the new owner while the old one
    still writes, and a rollback from step 1 changes no owner at all.
    """
    run_state_machine_as_test(NoBlock, settings=settings(SEARCH, max_examples=150))
