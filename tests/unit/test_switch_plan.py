"""Zone switch planning: the rule sets each step publishes, and the requests refused up front.

S000-03: the staged versions pass the rule check a switch pushes with; S000-14:
rollback restores the recorded version; S000-38: `overlaps` is the lease test
for ZSIDs another switch holds. The property at the end checks, on random rule
sets and requests, that only the moved ZSIDs ever change.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zonesync.rules.check import check
from zonesync.rules.extract import RuleIndex
from zonesync.rules.model import ACTIVE, BLOCK, RESHARDING, Rule, RuleSet, TableSpec
from zonesync.switch.plan import (
    SwitchPlanError,
    SwitchRequest,
    activated,
    blocked,
    format_zsids,
    merge_rules,
    overlaps,
    parse_zsids,
    resharding,
    rolled_back,
    validate,
)

pytestmark = pytest.mark.unit

ZONES = ("a", "b", "c")
SPACE = 16
TABLES = {"t": TableSpec("t", "k", "modulo", buckets=SPACE)}
CURRENT = RuleSet(0, 29, (Rule(0, 9, "a"), Rule(10, 19, "b"), Rule(20, 29, "a")), TABLES, 1500)


def req(zsids="3-6,20-21", from_zone="a", to_zone="b", reason="move"):
    return SwitchRequest.parse(zsids, from_zone, to_zone, reason)


@st.composite
def switch_cases(draw, space=SPACE):
    """A rule set over 0..space-1 (mostly ACTIVE) and a valid request moving some of one zone's ZSIDs."""
    cuts = sorted(draw(st.sets(st.integers(1, space - 1), max_size=6)))
    edges = [0, *cuts, space]
    rules = [
        Rule(lo, hi - 1, draw(st.sampled_from(ZONES)), draw(st.sampled_from([ACTIVE, ACTIVE, ACTIVE, BLOCK])))
        for lo, hi in zip(edges, edges[1:], strict=False)
    ]
    rules[0] = Rule(rules[0].lo, rules[0].hi, rules[0].zone)  # someone must own something ACTIVE to move
    owners = sorted({r.zone for r in rules if r.status == ACTIVE})
    from_zone = draw(st.sampled_from(owners))
    owned = sorted(z for r in rules if r.zone == from_zone and r.status == ACTIVE for z in range(r.lo, r.hi + 1))
    moved = draw(st.sets(st.sampled_from(owned), min_size=1))
    to_zone = draw(st.sampled_from([z for z in ZONES if z != from_zone]))
    request = SwitchRequest(tuple((z, z) for z in moved), from_zone, to_zone, "property")
    return RuleSet(0, space - 1, tuple(rules), TABLES), request


# -- ZSID sets -------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, spans",
    [
        ("0-99,200,300-310", [(0, 99), (200, 200), (300, 310)]),
        (" 300-310 , 7 ,0 - 5", [(0, 5), (7, 7), (300, 310)]),
        ("0-5,3-9,10,12", [(0, 10), (12, 12)]),
        ("4", [(4, 4)]),
    ],
)
def test_zsid_sets_parse_sorted_and_merged_and_format_back(text, spans):
    assert parse_zsids(text) == spans
    assert parse_zsids(format_zsids(spans)) == spans


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "no ZSIDs given"),
        ("1,,2", "part 2 of '1,,2' is empty"),
        ("0-5,5-x", "part 2 '5-x' is neither a ZSID nor a range"),
        ("-3", "part 1 '-3' is neither"),
        ("1-2-3", "part 1 '1-2-3'"),
        ("7,99-3", "part 2 '99-3' runs backwards: write it as '3-99'"),
    ],
)
def test_bad_zsid_sets_name_the_part(text, words):
    with pytest.raises(ValueError, match=words):
        parse_zsids(text)
    with pytest.raises(SwitchPlanError, match=f"^zsids: .*{words}") as err:
        req(text)
    assert err.value.field == "zsids"


def test_backwards_span_in_a_built_request_is_refused():
    with pytest.raises(SwitchPlanError, match="zsids: range 9-3 runs backwards"):
        SwitchRequest(((9, 3),), "a", "b", "x")


@pytest.mark.parametrize(
    "a, b, both",
    [
        ([(0, 9)], [(10, 19)], []),
        ([(0, 9)], [(9, 19)], [(9, 9)]),
        ([(0, 5), (10, 20)], [(3, 12), (18, 30)], [(3, 5), (10, 12), (18, 20)]),
        ([(5, 5)], [(0, 99)], [(5, 5)]),
        ([], [(0, 9)], []),
    ],
)
def test_overlaps_is_symmetric_and_exact(a, b, both):
    assert overlaps(a, b) == both
    assert overlaps(b, a) == both


# -- validation ------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_, field, words",
    [
        (req(from_zone="x"), "from_zone", "unknown zone 'x' (known zones: a, b, c)"),
        (req(to_zone="q"), "to_zone", "unknown zone 'q'"),
        (req(to_zone="a"), "to_zone", "'a' is also from_zone"),
        (req(reason="  "), "reason", "a reason is required"),
        (SwitchRequest((), "a", "b", "r"), "zsids", "no ZSIDs given"),
        (req("25-40"), "zsids", "ZSIDs 30-40 lie outside the ZSID space 0-29"),
        (req("8-12,15"), "zsids", "ZSIDs 10-12,15 are ACTIVE in zone b: every moved ZSID must be ACTIVE in from_zone"),
    ],
)
def test_each_bad_request_names_its_field_and_the_fix(request_, field, words):
    with pytest.raises(SwitchPlanError) as err:
        validate(request_, CURRENT, set(ZONES))
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert words in str(err.value)


def test_zsids_another_switch_holds_name_status_and_owner():
    mid_switch = resharding(blocked(CURRENT, req("0-1")), req("0-1"))
    mid_switch = blocked(mid_switch, req("5"))
    with pytest.raises(SwitchPlanError) as err:
        validate(req("0-7"), mid_switch, set(ZONES))
    assert err.value.field == "zsids"
    assert "ZSIDs 0-1 are RESHARDING in zone b; ZSID 5 is BLOCK in zone a" in str(err.value)
    assert "roll back the switch" in str(err.value)


def test_current_rules_that_fail_the_check_are_refused():
    gap = RuleSet(0, 29, (Rule(0, 9, "a"), Rule(20, 29, "a")))
    with pytest.raises(SwitchPlanError, match=r"^rules: .*ZSIDs 10-19: no rule covers them") as err:
        validate(req(), gap, set(ZONES))
    assert err.value.field == "rules"


def test_a_good_request_passes():
    validate(req("0-9,25"), CURRENT, set(ZONES))
    validate(req("10-19", "b", "c"), CURRENT, set(ZONES))


# -- staged rule sets ------------------------------------------------------------
def spans(rules: RuleSet):
    return [(r.lo, r.hi, r.zone, r.status) for r in rules.rules]


def test_stages_split_at_the_moved_boundaries_and_keep_the_rest():
    r = req()
    assert spans(blocked(CURRENT, r)) == [
        (0, 2, "a", ACTIVE),
        (3, 6, "a", BLOCK),
        (7, 9, "a", ACTIVE),
        (10, 19, "b", ACTIVE),
        (20, 21, "a", BLOCK),
        (22, 29, "a", ACTIVE),
    ]
    assert spans(resharding(CURRENT, r)) == [
        (0, 2, "a", ACTIVE),
        (3, 6, "b", RESHARDING),
        (7, 9, "a", ACTIVE),
        (10, 19, "b", ACTIVE),
        (20, 21, "b", RESHARDING),
        (22, 29, "a", ACTIVE),
    ]
    assert spans(activated(CURRENT, r)) == [
        (0, 2, "a", ACTIVE),
        (3, 6, "b", ACTIVE),
        (7, 9, "a", ACTIVE),
        (10, 21, "b", ACTIVE),  # merged with b's neighbour
        (22, 29, "a", ACTIVE),
    ]
    for stage in (blocked, resharding, activated):
        assert stage(CURRENT, r).tables == TABLES
        assert stage(CURRENT, r).txn_deadline_ms == 1500
    assert rolled_back(CURRENT) is CURRENT


def test_stages_are_idempotent_on_the_head_so_a_killed_task_can_rerun():
    r = req()
    b = blocked(CURRENT, r)
    assert blocked(b, r) == b
    assert resharding(b, r) == resharding(CURRENT, r)
    assert activated(resharding(b, r), r) == activated(CURRENT, r)
    assert activated(activated(CURRENT, r), r) == activated(CURRENT, r)


def test_switching_back_and_forth_does_not_fragment_the_rules():
    rules = CURRENT
    for _ in range(5):
        rules = activated(rules, req("0-9", "a", "b"))
        assert spans(rules) == [(0, 19, "b", ACTIVE), (20, 29, "a", ACTIVE)]
        rules = activated(rules, req("0-9", "b", "a"))
        assert rules == CURRENT


def test_rollback_with_head_restores_only_the_moved_zsids():
    mine, other = req("3-6"), req("12-13", "b", "c")
    head = blocked(blocked(CURRENT, mine), other)  # another switch is under way on 12-13
    back = rolled_back(CURRENT, head, mine)
    assert back == blocked(CURRENT, other)
    with pytest.raises(TypeError, match="both head and req"):
        rolled_back(CURRENT, head)


def test_stages_refuse_zsids_outside_the_space_even_unvalidated():
    with pytest.raises(SwitchPlanError, match="zsids: ZSID 30 lies outside"):
        blocked(CURRENT, req("29-30"))


def test_non_moved_zsids_have_the_same_rule_in_every_stage():
    r = req()
    before = RuleIndex(CURRENT)
    moved = {z for lo, hi in r.zsids for z in range(lo, hi + 1)}
    for stage in (blocked(CURRENT, r), resharding(CURRENT, r), activated(CURRENT, r), rolled_back(CURRENT)):
        index = RuleIndex(stage)
        for zsid in range(30):
            if zsid not in moved:
                old, new = before.rule_for(zsid), index.rule_for(zsid)
                assert (new.zone, new.status) == (old.zone, old.status), zsid


@settings(max_examples=300, deadline=None)
@given(switch_cases())
def test_every_stage_passes_the_check_and_only_moved_zsids_change(case):
    current, r = case
    known = set(ZONES)
    validate(r, current, known)
    all_active = all(rule.status == ACTIVE for rule in current.rules)
    moved = {z for lo, hi in r.zsids for z in range(lo, hi + 1)}
    before = RuleIndex(current)
    stages = [
        (blocked(current, r), (r.from_zone, BLOCK), False),
        (resharding(current, r), (r.to_zone, RESHARDING), False),
        (activated(current, r), (r.to_zone, ACTIVE), all_active),
        (rolled_back(current), None, all_active),
    ]
    for rules, moved_to, writable in stages:
        check(rules, known, require_writable=False)
        if writable:
            check(rules, known, require_writable=True)
        assert rules.tables == current.tables
        index = RuleIndex(rules)
        for zsid in range(current.zsid_min, current.zsid_max + 1):
            old, new = before.rule_for(zsid), index.rule_for(zsid)
            expected = moved_to if zsid in moved and moved_to else (old.zone, old.status)
            assert (new.zone, new.status) == expected, zsid
    for rules, _, _ in stages[:3]:
        assert merge_rules(rules.rules) == rules.rules
    back = SwitchRequest(r.zsids, r.to_zone, r.from_zone, "back")
    assert activated(activated(current, r), back).rules == merge_rules(current.rules)
