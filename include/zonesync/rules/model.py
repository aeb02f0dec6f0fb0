"""The rule set: who owns each ZSID, in which state, and how rows map to ZSIDs.

A rule set is one document (YAML on disk, JSON in the meta store), validated in
two passes: the JSON schema (ruleset.schema.json) for shape, then the semantic
checks a schema cannot express (ranges inside the ZSID space, lo <= hi). Every
error carries the path of the field, `rules[2].zsids`, so the author can find it.

Whether the rules are *safe* (each ZSID writable in exactly one zone) is the
rule check's job (check.py), not the parser's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from zonesync.user_files import UserFileError, read_user_text

ACTIVE, BLOCK, RESHARDING = "ACTIVE", "BLOCK", "RESHARDING"
STATUSES = (ACTIVE, BLOCK, RESHARDING)
SCHEMA_FILE = Path(__file__).with_name("ruleset.schema.json")


class RuleSetError(ValueError):
    """The rule document is malformed; `problems` lists 'path: message' lines."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


@dataclass(frozen=True)
class Rule:
    lo: int
    hi: int
    zone: str
    status: str = ACTIVE

    def writable_in(self, zone: str) -> bool:
        return self.status == ACTIVE and self.zone == zone

    def zsids_text(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


@dataclass(frozen=True)
class EntitySpec:
    type: str
    column: str


@dataclass(frozen=True)
class TableSpec:
    name: str
    column: str
    function: str
    buckets: int | None = None
    mapping: dict[str, int] | None = None
    ranges: tuple[tuple[int, int, int], ...] = ()
    entity: EntitySpec | None = None
    # rows live only in their entity's unit (docs/migration.md, "Resident tables"): the
    # mesh does not replicate them; a migration moves them with their entity
    resident: bool = False
    # (resident, keyed by the zone's AUTO_INCREMENT) a migration gives each moving row a new
    # key in the target and keeps the mapping (docs/migration.md, "Replaced keys")
    replace_key: bool = False


@dataclass(frozen=True)
class RuleSet:
    zsid_min: int
    zsid_max: int
    rules: tuple[Rule, ...]
    tables: dict[str, TableSpec] = field(default_factory=dict)
    txn_deadline_ms: int = 2000

    def to_doc(self) -> dict:
        """The canonical document (what the meta store keeps and `rules show` prints)."""
        tables = {}
        for name, t in sorted(self.tables.items()):
            spec: dict = {"column": t.column, "function": t.function}
            if t.buckets is not None:
                spec["buckets"] = t.buckets
            if t.mapping is not None:
                spec["map"] = dict(sorted(t.mapping.items()))
            if t.ranges:
                spec["ranges"] = [{"lo": lo, "hi": hi, "zsid": z} for lo, hi, z in t.ranges]
            if t.entity:
                spec["entity"] = {"type": t.entity.type, "column": t.entity.column}
            if t.resident:
                spec["resident"] = True
            if t.replace_key:
                spec["replace_key"] = True
            tables[name] = spec
        return {
            "zsid_space": {"min": self.zsid_min, "max": self.zsid_max},
            "txn_deadline_ms": self.txn_deadline_ms,
            "rules": [
                {"zsids": r.zsids_text(), "zone": r.zone, "status": r.status}
                for r in sorted(self.rules, key=lambda r: (r.lo, r.hi, r.zone))
            ],
            "tables": tables,
        }

    def zones(self) -> set[str]:
        return {r.zone for r in self.rules}

    def resident_tables(self) -> dict[str, TableSpec]:
        """The tables whose rows live only in their entity's unit, by name."""
        return {name: t for name, t in self.tables.items() if t.resident}

    def replicated_tables(self) -> dict[str, TableSpec]:
        """The tables the mesh replicates to every zone (all but the resident ones), by name."""
        return {name: t for name, t in self.tables.items() if not t.resident}


@lru_cache(maxsize=1)
def _validator():
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _parse_zsids(value, where: str, problems: list[str]) -> tuple[int, int] | None:
    if isinstance(value, int):
        return value, value
    lo_text, _, hi_text = str(value).partition("-")
    lo, hi = int(lo_text), int(hi_text or lo_text)
    if lo > hi:
        problems.append(f"{where}: range {value!r} runs backwards: write it as '{hi}-{lo}'")
        return None
    return lo, hi


def parse(doc: object, source: str = "rule set") -> RuleSet:
    """Validate a rule document and build the RuleSet, or raise RuleSetError."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise RuleSetError(source, [f"{_path(e.absolute_path)}: {e.message}" for e in errors])
    assert isinstance(doc, dict)
    problems: list[str] = []
    space = doc["zsid_space"]
    zmin, zmax = space["min"], space["max"]
    if zmin > zmax:
        problems.append(f"zsid_space: min {zmin} is above max {zmax}")
    rules = []
    for i, raw in enumerate(doc["rules"]):
        span = _parse_zsids(raw["zsids"], f"rules[{i}].zsids", problems)
        if span is None:
            continue
        lo, hi = span
        if lo < zmin or hi > zmax:
            problems.append(f"rules[{i}].zsids: {raw['zsids']} lies outside the ZSID space {zmin}-{zmax}")
        rules.append(Rule(lo, hi, raw["zone"], raw.get("status", ACTIVE)))
    tables = {}
    for name, raw in doc["tables"].items():
        where = f"tables.{name}"
        ranges = tuple((r["lo"], r["hi"], r["zsid"]) for r in raw.get("ranges", []))
        mapping = raw.get("map")
        buckets = raw.get("buckets")
        if raw["function"] == "modulo" and buckets is not None and zmin + buckets - 1 > zmax:
            problems.append(
                f"{where}.buckets: {buckets} buckets map to ZSIDs {zmin}-{zmin + buckets - 1}, "
                f"beyond the ZSID space {zmin}-{zmax}"
            )
        for j, (lo, hi, zsid) in enumerate(ranges):
            if lo > hi:
                problems.append(f"{where}.ranges[{j}]: lo {lo} is above hi {hi}")
            if not zmin <= zsid <= zmax:
                problems.append(f"{where}.ranges[{j}].zsid: {zsid} is outside the ZSID space {zmin}-{zmax}")
        for key, zsid in (mapping or {}).items():
            if not zmin <= zsid <= zmax:
                problems.append(f"{where}.map.{key}: {zsid} is outside the ZSID space {zmin}-{zmax}")
        entity = raw.get("entity")
        tables[name] = TableSpec(
            name=name,
            column=raw["column"],
            function=raw["function"],
            buckets=buckets,
            mapping=dict(mapping) if mapping is not None else None,
            ranges=ranges,
            entity=EntitySpec(entity["type"], entity["column"]) if entity else None,
            resident=bool(raw.get("resident", False)),
            replace_key=bool(raw.get("replace_key", False)),
        )
    if problems:
        raise RuleSetError(source, problems)
    return RuleSet(zmin, zmax, tuple(rules), tables, doc.get("txn_deadline_ms", 2000))


def load_file(path: str | Path) -> RuleSet:
    """A rules file (UTF-8 YAML; a BOM is fine), or RuleSetError naming the file and the fix."""
    path = Path(path)
    try:
        text = read_user_text(path, "rules file")
    except UserFileError as exc:  # missing, a directory, unreadable, not UTF-8, binary
        raise RuleSetError(str(path), [exc.problem]) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.reader.ReaderError as exc:  # a control character: its message would take two lines
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        problem = f"not valid YAML at line {line}, column {column}: control character U+{exc.character:04X}"
        raise RuleSetError(str(path), [f"{problem} is not allowed: remove it"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise RuleSetError(str(path), [f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}"]) from None
    if doc is None:
        raise RuleSetError(
            str(path),
            [
                "the file is empty (or only comments): write a rule set (zsid_space, rules, tables), "
                "e.g. start from examples/rules.yaml"
            ],
        )
    return parse(doc, str(path))
