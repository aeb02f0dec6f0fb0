"""The rule check (规则检查): before a rule set is stored, prove single-writer.

The seed's method is literal: try every ZSID in every zone; if more than one
zone accepts it, the rule set is refused. We do the same over elementary
intervals instead of single ZSIDs (the ZSIDs between two consecutive rule
boundaries behave identically), so a space of 2^32 ZSIDs checks as fast as 10.

Two strengths:
- `require_writable=True` (what `zonesync rules apply` uses): every ZSID is
  writable in exactly one zone. A ZSID with no rule, or only BLOCK/RESHARDING
  rules, is an error: nobody could write it.
- `require_writable=False` (the intermediate versions a zone switch pushes):
  every ZSID has exactly one rule and is writable in at most one zone.

Both refuse overlapping rules (two rules for one ZSID make the owner ambiguous,
even when only one of them is ACTIVE) and owners that are not known zones.
Every error names the ZSIDs and the zones involved.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.rules.model import RuleSet


@dataclass(frozen=True)
class Problem:
    lo: int
    hi: int
    kind: str  # gap | overlap | not-writable | unknown-zone
    zones: tuple[str, ...]

    def __str__(self) -> str:
        zsids = f"ZSID {self.lo}" if self.lo == self.hi else f"ZSIDs {self.lo}-{self.hi}"
        zones = ", ".join(self.zones)
        if self.kind == "gap":
            return f"{zsids}: no rule covers them, so no zone may write them: add a rule"
        if self.kind == "overlap":
            return f"{zsids}: covered by more than one rule (zones {zones}): keep exactly one"
        if self.kind == "not-writable":
            return f"{zsids}: writable in no zone (rule for {zones} is not ACTIVE): make it ACTIVE"
        return f"{zsids}: owner zone {zones} is not a known zone: add the zone or fix the name"


class RuleCheckError(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        shown = [str(p) for p in problems[:20]]
        more = f"; and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__("rule check failed: " + "; ".join(shown) + more)


def _elementary(rules: RuleSet) -> list[tuple[int, int]]:
    cuts = {rules.zsid_min, rules.zsid_max + 1}
    for r in rules.rules:
        if r.lo <= rules.zsid_max and r.hi >= rules.zsid_min:
            cuts.add(max(r.lo, rules.zsid_min))
            cuts.add(min(r.hi, rules.zsid_max) + 1)
    edges = sorted(cuts)
    return [(a, b - 1) for a, b in zip(edges, edges[1:], strict=False)]


def problems(rules: RuleSet, known_zones: set[str] | None = None, require_writable: bool = True) -> list[Problem]:
    found: list[Problem] = []
    if known_zones is not None:
        for r in rules.rules:
            if r.zone not in known_zones:
                found.append(Problem(r.lo, r.hi, "unknown-zone", (r.zone,)))
    for lo, hi in _elementary(rules):
        covering = [r for r in rules.rules if r.lo <= lo and r.hi >= hi]
        writable = sorted({r.zone for r in covering if r.status == "ACTIVE"})
        if not covering:
            found.append(Problem(lo, hi, "gap", ()))
        elif len(covering) > 1 or len(writable) > 1:
            found.append(Problem(lo, hi, "overlap", tuple(sorted({r.zone for r in covering}))))
        elif require_writable and not writable:
            found.append(Problem(lo, hi, "not-writable", (covering[0].zone,)))
    return _merge(found)


def _merge(found: list[Problem]) -> list[Problem]:
    """Join adjacent intervals with the same problem so messages name whole ranges."""
    merged: list[Problem] = []
    for p in sorted(found, key=lambda p: (p.kind, p.zones, p.lo)):
        last = merged[-1] if merged else None
        if last and last.kind == p.kind and last.zones == p.zones and last.hi + 1 == p.lo:
            merged[-1] = Problem(last.lo, p.hi, p.kind, p.zones)
        else:
            merged.append(p)
    return sorted(merged, key=lambda p: (p.lo, p.kind))


def check(rules: RuleSet, known_zones: set[str] | None = None, require_writable: bool = True) -> None:
    found = problems(rules, known_zones, require_writable)
    if found:
        raise RuleCheckError(found)


def writable_zones(rules: RuleSet, zsid: int) -> set[str]:
    """The zones that would accept a write of `zsid` (the seed's per-zone test)."""
    return {r.zone for r in rules.rules if r.lo <= zsid <= r.hi and r.writable_in(r.zone)}
