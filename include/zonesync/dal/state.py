"""What a guard enforces at one version: the decision for a single row.

Loaded whole from the meta store at version V (the newest rules <= V plus the
locating entities as of V) and swapped in atomically, so a write is always
judged against one complete, checked version, never a mix of two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zonesync.dal.errors import EntityWriteStopped, WrongZone, ZoneReshardingBlocked, ZsidUndetermined
from zonesync.rules.extract import RuleIndex, ZsidUnknown
from zonesync.rules.model import ACTIVE, RuleSet


@dataclass(frozen=True)
class Decision:
    zsid: int
    entity: tuple[str, str] | None


@dataclass
class GuardState:
    version: int
    zone: str
    rules: RuleSet | None
    # (le_type, le_id) -> (unit zone, stop_write)
    entities: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)

    def __post_init__(self):
        self.index = RuleIndex(self.rules) if self.rules is not None else None

    @property
    def deadline_ms(self) -> int:
        return self.rules.txn_deadline_ms if self.rules else 0

    def decide(self, table: str, row: dict) -> Decision:
        """Allow the write of `row` into `table` here, or raise why not."""
        if self.index is None:
            raise ZsidUndetermined(f"no rules published yet (version {self.version}): nothing is writable")
        try:
            spec = self.index.table(table)
            zsid = self.index.zsid_of(table, row)
            rule = self.index.rule_for(zsid)
        except ZsidUnknown as exc:
            raise ZsidUndetermined(str(exc)) from None
        if rule.status != ACTIVE:
            raise ZoneReshardingBlocked(zsid, rule.status, self.version)
        if rule.zone != self.zone:
            raise WrongZone(rule.zone, zsid, self.version)
        entity = None
        if spec.entity is not None:
            value = row.get(spec.entity.column)
            if value is None:
                raise ZsidUndetermined(f"table {table}: the row has no {spec.entity.column}, its entity column")
            entity = (spec.entity.type, str(value))
            known = self.entities.get(entity)
            if known is not None:
                unit, stopped = known
                if stopped:
                    raise EntityWriteStopped(entity[0], entity[1], self.version)
                if unit != self.zone:
                    raise WrongZone(unit, zsid, self.version, what=f"{entity[0]} {entity[1]}")
        return Decision(zsid, entity)

    def table_spec(self, table: str):
        if self.index is None:
            raise ZsidUndetermined(f"no rules published yet (version {self.version}): nothing is writable")
        try:
            return self.index.table(table)
        except ZsidUnknown as exc:
            raise ZsidUndetermined(str(exc)) from None
