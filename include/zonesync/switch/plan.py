"""The zone switch protocol as rule sets: which version each step publishes.

Seed 000 (Zone 切换) moves ZSIDs from zone A to zone B in pushes ("变更记录"),
each published as a new rules version and acked by every guard instance of both
zones before the next one goes out:

0. preflight: `validate` the request against the current rules (every moved
   ZSID ACTIVE in from_zone) and refuse ZSIDs another switch holds (`overlaps`
   against the leases in meta).
1. record the current version (记录当前状态便于操作回滚): rollback restores it.
2. record 1, `blocked`: the moved ZSIDs become BLOCK, still owned by A. No zone
   may write them; instances still on the old version write them only in A.
3. record 2, `resharding`: owner B, still not writable (RESHARDING). Time T is
   taken after the acks.
4. wait_sync: B has applied A's stream up to A's position at T + the longest
   transaction. No version is published.
5. record 3, `activated`: B ACTIVE. From here on failures are retried, never
   rolled back.

Why this never yields two writable owners, whatever instance lags where: the
coordinator publishes a step only after every live instance of both zones
acked the previous one, and an instance that missed that ack and outlived its
lease accepts nothing until it has loaded the newest version. So the instances
that accept writes run versions from one of these windows: {current, blocked},
{blocked, resharding} and {resharding, activated}, plus the rollback (= current)
next to the first two. In each window the moved ZSIDs are writable in A only
(current, rollback), nowhere (blocked, resharding) or in B only (activated),
never A and B together. Publish owner B ACTIVE in one step (the seed's 新老两份
规则同时生效), or skip the wait for acks, and the window {current, activated}
appears: A and B both write.

The failure cases the seed argues, and what the plan contributes:
- record 1 lost, instance dead, or ack lost (3.1-3.3): roll back to the recorded
  version (`rolled_back`); an instance that applied BLOCK and misses the
  rollback stays BLOCK (writes nothing) until keepalive brings it back.
- an instance acked record 1 then died (3.4): record 2 gets no ack, roll back.
- record 2 lost, ack lost or instance dead (4.1-4.3): roll back; instances
  that miss it stay BLOCK (owner A) or RESHARDING (owner B), neither writable.
- wait_sync times out: roll back, B never became writable.
- record 3 lost, instance dead, ack lost (5.1-5.4): retry `activated`, which is
  the same rule set every time, so a retry is idempotent.

Every function here is pure. The stage functions overwrite the moved ZSIDs
whatever their state, so applying one to the recorded rules or to a head that
already carries it gives the same result: a killed task can simply run again.
They merge adjacent rules with the same zone and status so rule sets do not
fragment over many switches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from zonesync.rules.check import RuleCheckError, check
from zonesync.rules.model import ACTIVE, BLOCK, RESHARDING, Rule, RuleSet

Span = tuple[int, int]
_PART = re.compile(r"([0-9]+)(?:\s*-\s*([0-9]+))?")


class SwitchPlanError(ValueError):
    """A switch request that must not start; `field` is the request field to fix."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def normalize(spans: Iterable[Span]) -> list[Span]:
    """Sort and join overlapping or adjacent spans, so one ZSID set has one spelling."""
    out: list[Span] = []
    for lo, hi in sorted(spans):
        if lo > hi:
            raise ValueError(f"range {lo}-{hi} runs backwards: write it as {hi}-{lo}")
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def parse_zsids(text: str) -> list[Span]:
    """Parse '0-99,200,300-310'; overlapping parts are joined, since a ZSID set has no order."""
    if not text or not text.strip():
        raise ValueError("no ZSIDs given: write ranges such as '0-99,200,300-310'")
    spans = []
    for i, raw in enumerate(text.split(","), 1):
        part = raw.strip()
        if not part:
            raise ValueError(f"part {i} of {text!r} is empty: remove the extra comma")
        m = _PART.fullmatch(part)
        if m is None:
            raise ValueError(f"part {i} {part!r} is neither a ZSID nor a range 'lo-hi' of non-negative integers")
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        if lo > hi:
            raise ValueError(f"part {i} {part!r} runs backwards: write it as '{hi}-{lo}'")
        spans.append((lo, hi))
    return normalize(spans)


def format_zsids(spans: Iterable[Span]) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in normalize(spans))


def overlaps(a: Iterable[Span], b: Iterable[Span]) -> list[Span]:
    """The ZSIDs in both sets: non-empty means another switch holds some of them."""
    a, b = normalize(a), normalize(b)
    out: list[Span] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Span], b: Iterable[Span]) -> list[Span]:
    """The ZSIDs of `a` not in `b`."""
    out: list[Span] = []
    cut = normalize(b)
    for lo, hi in normalize(a):
        for blo, bhi in cut:
            if bhi < lo or blo > hi:
                continue
            if blo > lo:
                out.append((lo, blo - 1))
            lo = bhi + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return out


@dataclass(frozen=True)
class SwitchRequest:
    zsids: tuple[Span, ...]
    from_zone: str
    to_zone: str
    reason: str = ""

    def __post_init__(self):
        try:
            spans = tuple(normalize(self.zsids))
        except ValueError as exc:
            raise SwitchPlanError("zsids", str(exc)) from None
        object.__setattr__(self, "zsids", spans)

    @classmethod
    def parse(cls, zsids: str, from_zone: str, to_zone: str, reason: str = "") -> SwitchRequest:
        try:
            spans = parse_zsids(zsids)
        except ValueError as exc:
            raise SwitchPlanError("zsids", str(exc)) from None
        return cls(tuple(spans), from_zone, to_zone, reason)

    @property
    def zsids_text(self) -> str:
        return format_zsids(self.zsids)


def _describe(spans: list[Span], singular: str, plural: str) -> str:
    text = format_zsids(spans)
    return f"ZSID {text} {singular}" if len(spans) == 1 and spans[0][0] == spans[0][1] else f"ZSIDs {text} {plural}"


def _space_problem(req: SwitchRequest, rules: RuleSet) -> SwitchPlanError | None:
    outside = subtract(req.zsids, [(rules.zsid_min, rules.zsid_max)])
    if not outside:
        return None
    return SwitchPlanError(
        "zsids",
        f"{_describe(outside, 'lies', 'lie')} outside the ZSID space {rules.zsid_min}-{rules.zsid_max}: "
        "move only ZSIDs inside it",
    )


def validate(req: SwitchRequest, current: RuleSet, known_zones: set[str]) -> None:
    """Refuse a switch the protocol cannot carry out safely, naming the field to fix."""
    known = ", ".join(sorted(known_zones)) or "none"
    for name, zone in (("from_zone", req.from_zone), ("to_zone", req.to_zone)):
        if zone not in known_zones:
            raise SwitchPlanError(name, f"unknown zone {zone!r} (known zones: {known}): name a registered zone")
    if req.from_zone == req.to_zone:
        raise SwitchPlanError("to_zone", f"{req.to_zone!r} is also from_zone: a switch moves ZSIDs to a different zone")
    if not req.reason.strip():
        raise SwitchPlanError("reason", "a reason is required for every switch: say why these ZSIDs move")
    if not req.zsids:
        raise SwitchPlanError("zsids", "no ZSIDs given: name the ranges to move, such as '0-99,200'")
    if (err := _space_problem(req, current)) is not None:
        raise err
    try:
        check(current, known_zones, require_writable=False)
    except RuleCheckError as exc:
        raise SwitchPlanError("rules", f"the current rules fail the rule check, fix them first: {exc}") from None
    wrong: dict[tuple[str, str], list[Span]] = {}
    for rule in sorted(current.rules, key=lambda r: r.lo):
        if rule.zone != req.from_zone or rule.status != ACTIVE:
            wrong.setdefault((rule.zone, rule.status), []).extend(overlaps([(rule.lo, rule.hi)], req.zsids))
    shown = "; ".join(
        f"{_describe(normalize(spans), 'is', 'are')} {st} in zone {zone}"
        for (zone, st), spans in wrong.items()
        if spans
    )
    if shown:
        raise SwitchPlanError(
            "zsids",
            f"{shown}: every moved ZSID must be ACTIVE in from_zone {req.from_zone!r}; move only its ZSIDs "
            "(`zonesync rules show`), or finish or roll back the switch that holds BLOCK/RESHARDING ones",
        )


def merge_rules(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """Join adjacent rules with the same zone and status: same meaning, fewer rows."""
    out: list[Rule] = []
    for r in sorted(rules, key=lambda r: (r.lo, r.hi)):
        if out and out[-1].hi + 1 == r.lo and (out[-1].zone, out[-1].status) == (r.zone, r.status):
            out[-1] = replace(out[-1], hi=r.hi)
        else:
            out.append(r)
    return tuple(out)


def _outside(base: RuleSet, spans: tuple[Span, ...]) -> list[Rule]:
    return [replace(r, lo=lo, hi=hi) for r in base.rules for lo, hi in subtract([(r.lo, r.hi)], spans)]


def _assign(base: RuleSet, req: SwitchRequest, zone: str, status: str) -> RuleSet:
    if (err := _space_problem(req, base)) is not None:
        raise err
    moved = [Rule(lo, hi, zone, status) for lo, hi in req.zsids]
    return replace(base, rules=merge_rules(_outside(base, req.zsids) + moved))


def blocked(current: RuleSet, req: SwitchRequest) -> RuleSet:
    """Record 1: nobody writes the moved ZSIDs; the owner stays from_zone so rollback changes no owner."""
    return _assign(current, req, req.from_zone, BLOCK)


def resharding(current: RuleSet, req: SwitchRequest) -> RuleSet:
    """Record 2: the owner moves while writes stay stopped, so T can be taken before anyone writes in B."""
    return _assign(current, req, req.to_zone, RESHARDING)


def activated(current: RuleSet, req: SwitchRequest) -> RuleSet:
    """Record 3: to_zone writes the moved ZSIDs. Only after every instance acked record 2 and B caught up."""
    return _assign(current, req, req.to_zone, ACTIVE)


def rolled_back(recorded: RuleSet, head: RuleSet | None = None, req: SwitchRequest | None = None) -> RuleSet:
    """The version a rollback publishes.

    Alone, the recorded pre-switch rules, unchanged. With `head` and `req`, the
    head with only the moved ZSIDs restored from `recorded`, so that a switch
    running concurrently on other ZSIDs is not undone by this one's rollback.
    """
    if head is None and req is None:
        return recorded
    if head is None or req is None:
        raise TypeError("rolled_back: pass both head and req, or neither")
    restored = [replace(r, lo=lo, hi=hi) for r in recorded.rules for lo, hi in overlaps([(r.lo, r.hi)], req.zsids)]
    return replace(head, rules=merge_rules(_outside(head, req.zsids) + restored))
