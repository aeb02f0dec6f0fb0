"""Property: the rule check accepts exactly the rule sets with one writable owner per ZSID.

The oracle is the seed's literal method (规则检查): try every ZSID in every zone
and count who accepts it. The checker works on intervals; they must agree on
every random rule set.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zonesync.rules.check import problems
from zonesync.rules.model import Rule, RuleSet

pytestmark = pytest.mark.unit

KNOWN = {"a", "b", "c"}
SPACE = 24


@st.composite
def rule_sets(draw):
    rules = []
    for _ in range(draw(st.integers(1, 6))):
        lo = draw(st.integers(0, SPACE - 1))
        hi = draw(st.integers(lo, min(SPACE - 1, lo + draw(st.integers(0, SPACE)))))
        zone = draw(st.sampled_from(["a", "b", "c", "x"]))
        status = draw(st.sampled_from(["ACTIVE", "ACTIVE", "BLOCK", "RESHARDING"]))
        rules.append(Rule(lo, hi, zone, status))
    return RuleSet(0, SPACE - 1, tuple(rules))


def oracle(rules: RuleSet, require_writable: bool) -> bool:
    if any(r.zone not in KNOWN for r in rules.rules):
        return False
    for zsid in range(rules.zsid_min, rules.zsid_max + 1):
        covering = [r for r in rules.rules if r.lo <= zsid <= r.hi]
        accepting = [z for z in sorted(KNOWN) if any(r.writable_in(z) for r in covering)]
        if len(covering) != 1 or len(accepting) > 1:
            return False
        if require_writable and len(accepting) != 1:
            return False
    return True


@settings(max_examples=400, deadline=None)
@given(rule_sets(), st.booleans())
def test_check_agrees_with_trying_every_zsid_in_every_zone(rules, require_writable):
    assert (problems(rules, KNOWN, require_writable) == []) == oracle(rules, require_writable)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8), st.data())
def test_every_partition_of_the_space_into_active_owners_is_accepted(owners, data):
    cuts = sorted(data.draw(st.sets(st.integers(1, SPACE - 1), max_size=len(owners) - 1)))
    edges = [0, *cuts, SPACE]
    rules = tuple(
        Rule(lo, hi - 1, owners[i % len(owners)]) for i, (lo, hi) in enumerate(zip(edges, edges[1:], strict=False))
    )
    assert problems(RuleSet(0, SPACE - 1, rules), KNOWN) == []
