"""Model-based test of a migration's ownership protocol for one LE (S004-18, S000-15's kin).

One locating entity, tenant 7, moves from unit a to unit b. Two guard instances in each
zone judge its writes with the real GuardState (dal/state.py) at the version they run.
The coordinator publishes the versions migrate/steps.py publishes, each a full snapshot
of the LE's registration:

    v0    unit a, writable          (before the run)
    stop  unit a, stop-write        every registered instance must ack (unhealthy too)
    flip  unit b, stop-write        the point of no return; every healthy instance acks
    lift  unit b, writable          the run succeeds
    rollback  unit a, writable      only before the flip (claim_phase), after which a
                                    second run may start

Faults, all at any point: a push is delayed, reordered or lost (an instance loads any
version newer than the one it runs, never an older one: S000-12; the newest one when
keepalive retries), an ack is lost (meta keeps the older version_applied) and re-reported
by a later heartbeat, an instance crashes, or is cut off from meta (its lease runs out
and it refuses every write: fail closed, dal/guard.py), and comes back loading the
newest version before its first write (S000-11). The coordinator waits for acks as the
steps do, but once it has seen them it may publish at any later moment (a restart may
have taken an ack back meanwhile), and it may roll back at any moment before the flip
(an ack timeout, a sync timeout, a final-check difference); a run rolled back or lifted
may be followed by another from wherever the LE is (a retry, a migration back).

Where the model is coarser than the product, it allows more, never less, so no
counterexample here means none in the product's schedules either:
- a write is accepted or refused at an instant, by the version its instance runs: the
  guard rechecks every row at commit under its lock, and acks a version only after the
  swap, which waits for the commits judged under the older one;
- "healthy" is "up": the product keeps waiting for a silent instance 4 periods, longer
  than its 3-period lease, so by the time it is skipped it refuses;
- a restarted instance takes its old registration's place (the product's stays, and
  blocks the stop until forgotten);
- the heartbeat re-reporting a version whose ack was lost is the product's too (S000-08:
  `Guard._heartbeat` carries the version it runs, integration/dal/
  test_guard_heartbeat.py); liveness is not modelled.

An explicit-state search (breadth first, instances of a zone interchangeable) visits
every reachable state and checks in each:

- single unit: the instances that would accept a write of tenant 7 are all in one zone;
- current unit: each of them is in the unit of the newest published version (once the
  unit has flipped, nobody writes in a; once lifted, b alone writes).

The real protocol has no counterexample. Each broken variant has one, the shortest
printed (`pytest -s`). Two variants stay safe, and the test says so: lifting before
every guard acked the flip (the stop's acks, by every instance before the flip, already
keep a from writing, and no instance moves back: the flip's wait is not what keeps one
writer), and a stop that skips silent instances (their lease ran out: they refuse).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, replace
from functools import cache

import pytest

from zonesync.dal.errors import WriteRefused
from zonesync.dal.state import GuardState
from zonesync.rules import parse

pytestmark = pytest.mark.unit

LE = ("tenant", "7")
# tenant 7's ZSID 7 is zone c's: a registered LE's unit decides, never its ZSID's owner
RULES = parse(
    {
        "zsid_space": {"min": 0, "max": 9},
        "rules": [{"zsids": "0-9", "zone": "c"}],
        "tables": {
            "orders": {
                "column": "tenant_id",
                "function": "modulo",
                "buckets": 10,
                "entity": {"type": "tenant", "column": "tenant_id"},
            }
        },
    }
)
ZONES = ("a", "b")
PER_ZONE = 2
NAMES = [f"{z}{n}" for z in ZONES for n in range(PER_ZONE)]

# A version's content: (unit, stop-write). A protocol's steps name it by role: the run's
# source ("src") or target ("dst").
V0 = ("a", False)
STOP, FLIP, LIFT, ROLLBACK = ("src", True), ("dst", True), ("dst", False), ("src", False)

UP, DOWN, CUT = 0, 1, 2  # CUT: cut off from meta and still writing (only when not fail closed)
EVERY, HEALTHY, NONE = "every registered instance", "every healthy instance", "nobody"
TWO_UNITS, OTHER_UNIT = "two units accept writes", "accepts writes of tenant 7 while its unit is"


@cache
def writable(content: tuple[str, bool], zone: str) -> bool:
    """Would a guard of `zone` running a version with tenant 7 at `content` let its order
    through? Asked of the real GuardState."""
    unit, stopped = content
    state = GuardState(1, zone, RULES, {LE: (unit, stopped)})
    try:
        state.decide("orders", {"order_id": 1, "tenant_id": 7})
        return True
    except WriteRefused:
        return False


@dataclass(frozen=True)
class Protocol:
    """A migration protocol: the steps a run publishes, in order, and whose acks each waits
    for before the next one is published; when a rollback may be published."""

    steps: tuple[tuple[str, tuple[str, bool], str], ...] = (("stop", STOP, EVERY), ("flip", FLIP, HEALTHY),
                                                            ("lift", LIFT, HEALTHY))  # fmt: skip
    rollback_until: str = "flip"  # a rollback may be published until this step is ("": ever)
    fail_closed: bool = True
    runs: int = 2  # runs one after another (a -> b, rolled back or lifted, then on from there)


REAL = Protocol()
S = {name: (content, who) for name, content, who in REAL.steps}


def waiting(step: str, who: str) -> tuple[str, tuple[str, bool], str]:
    return step, S[step][0], who


# name -> (protocol, the invariant its shortest counterexample breaks)
BROKEN = {
    # the seed's naive move: the unit changes with no stop-write (两份规则同时生效)
    "flip without stop-write": (replace(REAL, steps=(("flip", LIFT, HEALTHY),)), TWO_UNITS),
    # nothing waits: stop, flip and lift published back to back
    "no step waits for acks": (
        replace(REAL, steps=tuple(waiting(n, NONE) for n, _, _ in REAL.steps)),
        TWO_UNITS,
    ),
    # no claim_phase: the DAG's rollback task publishes its rollback after the flip and lift
    "rollback after the flip": (replace(REAL, rollback_until=""), TWO_UNITS),
    # the stop skips instances that stopped heartbeating (as `guards forget` would), and a
    # guard cut off from meta keeps writing under the version it has (the seed's trust)
    "stop skips silent guards, no lease": (
        replace(REAL, steps=(waiting("stop", HEALTHY), *REAL.steps[1:]), fail_closed=False),
        TWO_UNITS,
    ),
    # the flip does not wait for the stop's acks: a writes on after the unit is b (writes
    # the sync position and the final check never saw); the flip's acks still keep b from
    # writing at the same time
    "flip before every guard acked the stop": (
        replace(REAL, steps=(waiting("stop", NONE), *REAL.steps[1:])),
        OTHER_UNIT,
    ),
}
STILL_SAFE = {
    "lift before every guard acked the flip": replace(
        REAL, steps=(REAL.steps[0], waiting("flip", NONE), REAL.steps[2])
    ),
    "the stop skips silent guards (fail closed)": replace(REAL, steps=(waiting("stop", HEALTHY), *REAL.steps[1:])),
}

# A state: (versions, src, step, seen, runs, instances)
#   versions   the contents published so far, oldest first (an instance runs an index)
#   src        the running run's source unit
#   step       how many of the run's steps are published (-1: none, or rolled back)
#   seen       the coordinator saw the acks the newest step waits for
#   runs       runs started
#   instances  per instance (held, acked, status); acked: meta shows it runs the newest
#              version; sorted within each zone (interchangeable instances)


def canonical(versions, src, step, seen, runs, inst):
    inst = tuple(x for z in range(len(ZONES)) for x in sorted(inst[z * PER_ZONE : (z + 1) * PER_ZONE]))
    return versions, src, step, seen, runs, inst


def order(inst) -> list[int]:
    """The positions of `inst` in canonical order (canonical(...)[-1][k] == inst[order[k]])."""
    out = []
    for z in range(len(ZONES)):
        out += sorted(range(z * PER_ZONE, (z + 1) * PER_ZONE), key=lambda i: inst[i])
    return out


def initial():
    return canonical((V0,), "a", -1, False, 0, tuple((0, True, UP) for _ in NAMES))


def acks_seen(who: str, inst) -> bool:
    if who == NONE:
        return True
    if who == EVERY:  # meta's version_applied of every registration, healthy or not
        return all(acked for _, acked, _ in inst)
    return all(acked for _, acked, status in inst if status == UP)


def resolve(content: tuple[str, bool], src: str) -> tuple[str, bool]:
    role, stopped = content
    dst = next(z for z in ZONES if z != src)
    return (src if role == "src" else dst), stopped


def successors(p: Protocol, state):
    """(action, next state) pairs; an action is (kind, instance position or None, detail)."""
    versions, src, step, seen, runs, inst = state
    newest = len(versions) - 1
    out = []

    def publish(what, content, src_, step_, seen_, runs_):
        acks = tuple((h, False, s) for h, _, s in inst)
        out.append((("publish", None, (what, content)), (versions + (content,), src_, step_, seen_, runs_, acks)))

    # -- the coordinator ----------------------------------------------------------------
    last = len(p.steps)
    if 0 < step < last and not seen and acks_seen(p.steps[step - 1][2], inst):
        out.append((("seen", None, p.steps[step - 1][0]), (versions, src, step, True, runs, inst)))
    if step in (-1, last) and runs < p.runs:  # a new run, from the LE's unit now
        name, content, who = p.steps[0]
        src_ = versions[-1][0]
        publish(name, resolve(content, src_), src_, 1, who == NONE, runs + 1)
    elif 0 < step < last and seen:
        name, content, who = p.steps[step]
        publish(name, resolve(content, src), src, step + 1, who == NONE, runs)
    if step > 0 and p.rollback_until not in [n for n, _, _ in p.steps[:step]]:
        publish("rollback", resolve(ROLLBACK, src), src, -1, False, runs)
    # -- the instances and the network -------------------------------------------------
    for i, (held, acked, status) in enumerate(inst):

        def put(action, new, i=i):
            out.append((action, (versions, src, step, seen, runs, inst[:i] + (new,) + inst[i + 1 :])))

        if status == UP:
            for v in range(held + 1, newest + 1):  # a push (maybe late, maybe skipping some)
                if v < newest:
                    put(("load", i, (v, "an older push")), (v, False, UP))
                else:
                    put(("load", i, (v, "acked")), (v, True, UP))
                    put(("load", i, (v, "its ack lost")), (v, False, UP))
            if held == newest and not acked:  # a heartbeat re-reports the version it runs
                put(("reack", i, held), (held, True, UP))
            put(("crash", i, None), (held, acked, DOWN))
            if not p.fail_closed:
                put(("cut", i, None), (held, acked, CUT))
        else:  # a restart or a reconnect loads the newest version before any write
            put(("back", i, (newest, "acked")), (newest, True, UP))
            put(("back", i, (newest, "its ack lost")), (newest, False, UP))
    return [(a, canonical(*s)) for a, s in out]


def writers(p: Protocol, versions, inst) -> list[int]:
    return [i for i, (held, _, status) in enumerate(inst)
            if (status == UP or (status == CUT and not p.fail_closed))
            and writable(versions[held], ZONES[i // PER_ZONE])]  # fmt: skip


def violation(p: Protocol, versions, inst, invariants) -> str | None:
    zones = sorted({ZONES[i // PER_ZONE] for i in writers(p, versions, inst)})
    if TWO_UNITS in invariants and len(zones) > 1:
        return f"{TWO_UNITS} of tenant 7: {', '.join(zones)}"
    unit = versions[-1][0]
    if OTHER_UNIT in invariants and zones and zones[0] != unit:
        return f"zone {zones[0]} {OTHER_UNIT} {unit} (v{len(versions) - 1})"
    return None


@dataclass
class Search:
    states: int
    seconds: float
    counterexample: list[str] | None
    why: str | None


def explore(p: Protocol, invariants=(TWO_UNITS, OTHER_UNIT), limit: int = 2_000_000) -> Search:
    """Every state reachable from the start, breadth first; stops at the first violation
    (so a counterexample is a shortest one)."""
    began = time.monotonic()
    start = initial()
    parent = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        why = violation(p, state[0], state[-1], invariants)
        if why:
            return Search(len(parent), time.monotonic() - began, trace(p, parent, state, invariants), why)
        for action, nxt in successors(p, state):
            if nxt not in parent:
                parent[nxt] = (state, action)
                queue.append(nxt)
        assert len(parent) < limit, "the state space grew past its bound"
    return Search(len(parent), time.monotonic() - began, None, None)


def trace(p: Protocol, parent, state, invariants) -> list[str]:
    """The schedule that reaches `state`, each instance under its own name (the actions,
    found on canonical states, replayed on one concrete run)."""
    path = []
    while parent[state] is not None:
        state, action = parent[state]
        path.append(action)
    path.reverse()
    versions, inst, lines = (V0,), [(0, True, UP) for _ in NAMES], []
    for kind, pos, detail in path:
        i = order(inst)[pos] if pos is not None else None
        if kind == "publish":
            what, content = detail
            versions += (content,)
            inst = [(h, False, s) for h, _, s in inst]
            lines.append(f"publish v{len(versions) - 1} {what} (unit {content[0]}"
                         f"{', stop-write' if content[1] else ''})")  # fmt: skip
        elif kind == "seen":
            lines.append(f"the coordinator has the acks {detail} waits for")
        elif kind in ("load", "back"):
            v, how = detail
            inst[i] = (v, how == "acked", UP)
            lines.append(f"{NAMES[i]} {'loads' if kind == 'load' else 'comes back on'} v{v} ({how})")
        elif kind == "reack":
            inst[i] = (inst[i][0], True, UP)
            lines.append(f"{NAMES[i]}'s heartbeat re-reports v{detail}")
        else:
            inst[i] = (inst[i][0], inst[i][1], DOWN if kind == "crash" else CUT)
            lines.append(f"{NAMES[i]} {'crashes' if kind == 'crash' else 'is cut off from meta, keeps writing'}")
    who = ", ".join(f"{NAMES[i]} runs v{inst[i][0]}" for i in writers(p, versions, inst))
    lines.append(f"=> {violation(p, versions, inst, invariants)}: {who}")
    return lines


# -- the tests ---------------------------------------------------------------------------


def test_the_guard_decides_as_the_model_assumes():
    """The decisions the model reads: only an unstopped unit's own zone writes tenant 7
    (its ZSID's owner, c, does not: the registered unit decides)."""
    assert [z for z in ("a", "b", "c") if writable(("a", False), z)] == ["a"]
    assert [z for z in ("a", "b", "c") if writable(("b", False), z)] == ["b"]
    assert not any(writable((u, True), z) for u in ZONES for z in ("a", "b", "c"))


def test_the_real_protocol_keeps_one_writer_in_every_reachable_state():
    """Three runs one after another (a -> b, then on from wherever it ended: a migration
    back, or a retry after a rollback), every fault anywhere."""
    found = explore(replace(REAL, runs=3))
    print(f"real protocol: {found.states} states, {found.seconds:.1f} s")
    assert found.counterexample is None, "\n".join(found.counterexample)
    assert found.states > 50_000  # not a toy space


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_each_broken_variant_has_a_counterexample(variant):
    """The shortest schedule that breaks the invariant the variant breaks: two units
    writing at once, or (the flip not waiting for the stop's acks) a writing on after the
    unit flipped to b, while b, held back by the flip's acks, never writes at the same time."""
    protocol, broken = BROKEN[variant]
    found = explore(protocol, invariants=(broken,))
    assert found.counterexample is not None, f"{variant}: no counterexample in {found.states} states"
    print(f"{variant} ({found.states} states, {found.seconds:.1f} s):\n  " + "\n  ".join(found.counterexample))
    assert broken in found.why
    assert found.counterexample[-1].startswith(f"=> {found.why}: ")  # replayed, the schedule breaks it
    if broken == OTHER_UNIT:
        assert explore(protocol, invariants=(TWO_UNITS,)).counterexample is None


@pytest.mark.parametrize("variant", sorted(STILL_SAFE))
def test_variants_that_stay_safe(variant):
    """Lifting without the flip's acks keeps one writer: every instance acked the stop
    before the flip, and none moves back, so a stays stopped whatever the flip's pushes
    do; the flip's wait is for the guards' view of the unit (a refuses naming b), not for
    the invariant. And a stop that skips silent instances is safe because they fail
    closed (their lease ran out): without the lease it is a counterexample above."""
    found = explore(STILL_SAFE[variant])
    assert found.counterexample is None, "\n".join(found.counterexample)
