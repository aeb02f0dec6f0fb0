"""ZSID extraction and owner lookup: the two questions the guard asks per write.

`zsid_of(table, row)` turns a row into its ZSID with the table's declared
function; `RuleIndex.rule_for(zsid)` finds the rule in O(log n). Both refuse
rather than guess: an unknown table, a missing column, a value the map does not
list, or a ZSID no rule covers raises ZsidUnknown, and the guard refuses the
write.
"""

from __future__ import annotations

import bisect
from decimal import Decimal, InvalidOperation

from zonesync.rules.model import Rule, RuleSet, TableSpec


class ZsidUnknown(LookupError):
    """The write's ZSID cannot be determined; it must not be let through."""


def zsid_of(spec: TableSpec, row: dict, zsid_min: int = 0) -> int:
    if spec.column not in row or row[spec.column] is None:
        raise ZsidUnknown(f"table {spec.name}: the row has no value for {spec.column}, the column its ZSID comes from")
    value = row[spec.column]
    if spec.function == "modulo":
        try:
            return zsid_min + int(value) % int(spec.buckets or 1)
        except (TypeError, ValueError):
            raise ZsidUnknown(f"table {spec.name}: {spec.column}={value!r} is not an integer") from None
    if spec.function == "map":
        key = str(value)
        if key not in (spec.mapping or {}):
            raise ZsidUnknown(f"table {spec.name}: {spec.column}={value!r} is not in the table's ZSID map")
        return spec.mapping[key]
    for lo, hi, zsid in spec.ranges:
        try:
            if lo <= int(value) <= hi:
                return zsid
        except (TypeError, ValueError):
            raise ZsidUnknown(f"table {spec.name}: {spec.column}={value!r} is not an integer") from None
    raise ZsidUnknown(f"table {spec.name}: {spec.column}={value!r} falls in none of the table's ZSID ranges")


class RuleIndex:
    """Rules sorted by range start, for a binary search per write."""

    def __init__(self, rules: RuleSet):
        self.ruleset = rules
        self._rules = sorted(rules.rules, key=lambda r: r.lo)
        self._starts = [r.lo for r in self._rules]

    def table(self, name: str) -> TableSpec:
        spec = self.ruleset.tables.get(name)
        if spec is None:
            known = ", ".join(sorted(self.ruleset.tables)) or "none"
            raise ZsidUnknown(f"table {name!r} has no ZSID rule (declared tables: {known}): declare it in the rules")
        return spec

    def rule_for(self, zsid: int) -> Rule:
        i = bisect.bisect_right(self._starts, zsid) - 1
        if i >= 0 and self._rules[i].lo <= zsid <= self._rules[i].hi:
            return self._rules[i]
        raise ZsidUnknown(f"ZSID {zsid} is covered by no rule")

    def zsid_of(self, table: str, row: dict) -> int:
        return zsid_of(self.table(table), row, self.ruleset.zsid_min)

    def entity_zsid(self, entity_type: str, entity_id: str):
        """(table spec, ZSID) of an entity placed by the rules: the first declared table (by
        name) whose entity column, of this type, is its ZSID column, so the rules say which
        zone owns every such id; None when no table does, ZsidUnknown when that table
        cannot place this id."""
        for spec in sorted(self.ruleset.tables.values(), key=lambda s: s.name):
            if spec.entity is not None and spec.entity.type == entity_type and spec.entity.column == spec.column:
                return spec, zsid_of(spec, {spec.column: entity_id}, self.ruleset.zsid_min)
        return None


def integer_text(value) -> str | None:
    """The decimal text of an integer however it is spelled (7, '07', ' +7 ', 7.0,
    Decimal('7.00')), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        text = text.strip()
        digits = text[1:] if text[:1] in "+-" else text
        return str(int(text)) if digits.isdigit() and digits.isascii() else None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return str(int(number)) if number.is_finite() and number == number.to_integral_value() else None
