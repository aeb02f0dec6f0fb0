"""A consistency check's request: what a user asks for, checked before anything changes.

Every refusal is one line naming the field and the fix (CheckRefused); nothing is
written before the whole request is known to be valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.sql_names import is_ident, is_zone_name


def entity_tables(tables: dict, types: set[str]) -> list[str]:
    """The names of `tables` (name -> TableSpec) declaring an entity of one of `types`, sorted."""
    return [name for name, spec in sorted(tables.items())
            if getattr(spec, "entity", None) is not None and spec.entity.type in types]  # fmt: skip


class CheckRefused(ValueError):
    """A check that must not start: the message says why and what to do."""


@dataclass(frozen=True)
class CheckRequest:
    zones: tuple[str, ...] = ()  # empty: every zone of the mesh
    tables: tuple[str, ...] = ()  # empty: every replicated table
    chunk_rows: int = 100_000
    rows: bool = True  # read and diff the rows of chunks that differ
    repair: bool = False
    reason: str = "scheduled"
    # internal (the zone switch's verify): only these ZSIDs' rows, without what this zone id wrote
    zsids: tuple[tuple[int, int], ...] = ()
    exclude_origin: int | None = None
    # internal (a migration's verify): only the rows of these entities ((type, (id, ...)), ...)
    entities: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def resolved(self, zones, replicated_tables) -> CheckRequest:
        """This request checked against the mesh, with its zones and tables spelled out
        (`replicated_tables`: the rules' tables, name -> TableSpec; the resident ones are
        left out unless the request is restricted to entities)."""
        check_shape(self)
        known = sorted(zones)
        unknown = [z for z in self.zones if z not in zones]
        if unknown:
            raise CheckRefused(f"zones: unknown zone {', '.join(map(repr, unknown))}; the zones are {', '.join(known)}")
        picked = tuple(self.zones) or tuple(known)
        if len(picked) < 2:
            raise CheckRefused(f"zones: a check compares at least two zones; got {', '.join(picked) or 'none'}")
        if not replicated_tables:
            raise CheckRefused("tables: the rule set declares no table; publish rules with a tables: section first")
        # a resident table's rows live in their entity's unit only, so zones differ by design:
        # compared only where one entity's rows are (a migration's verify, `entities`)
        resident = sorted(t for t, s in replicated_tables.items() if getattr(s, "resident", False))
        asked_resident = [t for t in self.tables if t in resident]
        if asked_resident and not self.entities:
            raise CheckRefused(f"tables: {', '.join(asked_resident)} resident (rows live only in their entity's "
                               "unit, so zones differ by design): leave it out; a migration's verify compares "
                               "its entity's rows")  # fmt: skip
        replicated = sorted(t for t in replicated_tables if self.entities or t not in resident)
        if not replicated:
            raise CheckRefused("tables: every table of the rule set is resident: nothing is replicated to compare")
        odd = [t for t in self.tables if t not in replicated]
        if odd:
            raise CheckRefused(
                f"tables: {', '.join(odd)} not replicated; the rule set's tables are {', '.join(replicated)}"
            )
        tables = tuple(self.tables) or tuple(replicated)
        if self.entities:
            types = {t for t, _ in self.entities}
            declaring = set(entity_tables(replicated_tables, types))
            # a replace_key table's moved rows have other keys in the target: the migration's
            # final check compares them through its key map (migrate/final_check.py)
            declaring -= {t for t, s in replicated_tables.items() if getattr(s, "replace_key", False)}
            tables = tuple(t for t in tables if t in declaring)
            if not tables:
                raise CheckRefused(f"tables: no replicated table declares an entity of type {', '.join(sorted(types))}")
        return CheckRequest(picked, tables, self.chunk_rows, self.rows, self.repair, self.reason, self.zsids,
                            self.exclude_origin, self.entities)  # fmt: skip


def check_shape(req: CheckRequest) -> None:
    """What can be checked without the mesh: spelling, ranges, a reason."""
    for z in req.zones:
        if not is_zone_name(z):
            raise CheckRefused(f"zones: {z!r} is not a zone name (lower-case letters, digits, _; e.g. 'a')")
    for field, names in (("zones", req.zones), ("tables", req.tables)):
        if len(set(names)) != len(names):
            raise CheckRefused(f"{field}: a name is given twice; give each once")
    for t in req.tables:
        if not is_ident(t):
            raise CheckRefused(f"tables: {t!r} is not a plain table name")
    if (
        not isinstance(req.chunk_rows, int)
        or isinstance(req.chunk_rows, bool)
        or not 100 <= req.chunk_rows <= 10_000_000
    ):
        raise CheckRefused(f"chunk_rows: {req.chunk_rows!r} is out of range; use 100..10000000")
    if not isinstance(req.rows, bool) or not isinstance(req.repair, bool):
        raise CheckRefused("rows, repair: true or false")
    if req.repair and not req.rows:
        raise CheckRefused("repair: needs rows on (the row diff names the rows to repair); drop --no-rows")
    if not isinstance(req.reason, str) or not req.reason.strip() or len(req.reason) > 500:
        raise CheckRefused("reason: say why in 1..500 characters, e.g. --reason 'after the disk swap in b'")
