"""What a guard enforces at one version: the decision for a single row or KV key.

Loaded whole from the meta store at version V (the newest rules <= V, the locating
entities as of V and the newest tag rules <= V, whose KV patterns say which entity a
key belongs to) and swapped in atomically, so a write is always judged against one
complete, checked version, never a mix of two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zonesync.dal.errors import (
    EntityWriteStopped,
    KeyAmbiguous,
    KeyUntagged,
    WrongZone,
    ZoneReshardingBlocked,
    ZsidUndetermined,
)
from zonesync.rules.extract import RuleIndex, ZsidUnknown, integer_text
from zonesync.rules.model import ACTIVE, RuleSet
from zonesync.tagging.radix import AmbiguousKey, PatternTree


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
    tags_version: int = 0  # the tag rules whose KV patterns `kv_trees` holds (0: none)
    kv_trees: dict[str, PatternTree] = field(default_factory=dict)  # KV repo -> its patterns

    def __post_init__(self):
        self.index = RuleIndex(self.rules) if self.rules is not None else None

    @property
    def deadline_ms(self) -> int:
        return self.rules.txn_deadline_ms if self.rules else 0

    def decide(self, table: str, row: dict) -> Decision:
        """Allow the write of `row` into `table` here, or raise why not. The row's owner is
        its entity when its table declares one and the entity is registered (the unit and
        the stop-write flag decide, whatever zone holds its ZSID: an entity is placed, and
        migrated, on its own), else its ZSID (the rules' owner, ACTIVE). A resident table's
        row needs a registered entity: its rows live only in its unit, and a ZSID's owner
        changes by a zone switch, which moves no resident row."""
        if self.index is None:
            raise ZsidUndetermined(f"no rules published yet (version {self.version}): nothing is writable")
        try:
            spec = self.index.table(table)
            zsid = self.index.zsid_of(table, row)
        except ZsidUnknown as exc:
            raise ZsidUndetermined(str(exc)) from None
        entity = None
        if spec.entity is not None:
            value = row.get(spec.entity.column)
            if value is None:
                raise ZsidUndetermined(f"table {table}: the row has no {spec.entity.column}, its entity column")
            entity = (spec.entity.type, str(value))
            self._refuse_another_spelling(entity, value)
            if self._registered(entity, zsid):
                return Decision(zsid, entity)
            if spec.resident:  # its rows live in its unit only: an unregistered entity has none
                raise ZsidUndetermined(f"table {table} is resident: {entity[0]} {entity[1]} is not a registered "
                                       "entity, so no unit holds its rows: register it (`zonesync entity register`) "
                                       "before writing them")  # fmt: skip
        try:
            rule = self.index.rule_for(zsid)
        except ZsidUnknown as exc:
            raise ZsidUndetermined(str(exc)) from None
        if rule.status != ACTIVE:
            raise ZoneReshardingBlocked(zsid, rule.status, self.version)
        if rule.zone != self.zone:
            raise WrongZone(rule.zone, zsid, self.version)
        return Decision(zsid, entity)

    def _refuse_another_spelling(self, entity: tuple[str, str], value) -> None:
        """ZsidUndetermined when `value` spells a registered entity's integer id another way
        ('07', ' 7', '+7', 7.0 for 7): an INT column stores it as that entity's row, but the
        registry, keyed by the id's text, would not know it, and the row would be judged by
        its ZSID alone, writable where the entity is not (or while it is stopped). Refused,
        not guessed: in a text column '07' may be another entity, and writing it as 7 or as
        an unregistered id is the application's choice."""
        canonical = integer_text(value)
        if canonical is not None and canonical != entity[1] and (entity[0], canonical) in self.entities:
            raise ZsidUndetermined(f"{entity[0]} id {value!r} spells the registered {entity[0]} {canonical} "
                                   f"another way: write it as {canonical}")  # fmt: skip

    def _registered(self, entity: tuple[str, str], zsid: int | None) -> bool:
        """Whether the entity is registered (its unit and stop-write flag then decide:
        allowed here, or raise why not)."""
        known = self.entities.get(entity)
        if known is None:
            return False
        unit, stopped = known
        if stopped:
            raise EntityWriteStopped(entity[0], entity[1], self.version)
        if unit != self.zone:
            raise WrongZone(unit, zsid, self.version, what=f"{entity[0]} {entity[1]}")
        return True

    def decide_key(self, repo: str, key: str) -> Decision:
        """Allow a write of KV `key` in `repo` here, or raise why not: the key's pattern
        names its entity (seed 004 §3.2.2), and the entity is judged as a row's is (its
        registration, else the ZSID rules of a table that takes its ZSID from such ids)."""
        tree = self.kv_trees.get(repo)
        if tree is None:
            raise KeyUntagged(f"repo {repo} has no KV pattern in tag rules v{self.tags_version}: register the "
                              "key's pattern (zonesync tags apply) before writing it")  # fmt: skip
        try:
            found = tree.identify(key)
        except AmbiguousKey as exc:
            raise KeyAmbiguous(repo, key, exc.patterns, self.tags_version) from None
        if found is None:
            raise KeyUntagged(f"key {key!r} matches no pattern of repo {repo} (tag rules v{self.tags_version}): "
                              "register its pattern (zonesync tags apply), or fix the key")  # fmt: skip
        pattern, entity_id = found
        return self.decide_entity(pattern.entity_type, entity_id)

    def decide_entity(self, entity_type: str, entity_id: str) -> Decision:
        """Allow a write to what entity (type, id) holds here, or raise why not."""
        if self.index is None:
            raise ZsidUndetermined(f"no rules published yet (version {self.version}): nothing is writable")
        entity = (entity_type, str(entity_id))
        self._refuse_another_spelling(entity, entity_id)
        if self._registered(entity, None):
            return Decision(-1, entity)
        try:
            placed = self.index.entity_zsid(*entity)
            if placed is None:
                raise ZsidUndetermined(f"{entity[0]} {entity[1]} is not registered and no table of the rules "
                                       f"takes its ZSID from a {entity[0]} id: register it "
                                       "(zonesync entity register)")  # fmt: skip
            rule = self.index.rule_for(placed[1])
        except ZsidUnknown as exc:
            raise ZsidUndetermined(f"{entity[0]} {entity[1]}: {exc}") from None
        if rule.status != ACTIVE:
            raise ZoneReshardingBlocked(placed[1], rule.status, self.version)
        if rule.zone != self.zone:
            raise WrongZone(rule.zone, placed[1], self.version, what=f"{entity[0]} {entity[1]}")
        return Decision(placed[1], entity)

    def table_spec(self, table: str):
        if self.index is None:
            raise ZsidUndetermined(f"no rules published yet (version {self.version}): nothing is writable")
        try:
            return self.index.table(table)
        except ZsidUnknown as exc:
            raise ZsidUndetermined(str(exc)) from None
