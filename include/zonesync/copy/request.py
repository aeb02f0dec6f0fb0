"""A copy's request: what a user asks for, checked before anything changes.

Every refusal is one line naming the field and the fix (CopyRefused); nothing is
written before the whole request is known to be valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.sql_names import is_ident, is_zone_name

MODES = ("rebuild", "add-zone", "repair")  # add-zone: a zone added fenced (new_zone.py)


class CopyRefused(ValueError):
    """A copy that must not start (or go on): the message says why and what to do."""


@dataclass(frozen=True)
class CopyRequest:
    source_zone: str
    target_zone: str
    tables: tuple[str, ...]  # empty: every replicated table
    mode: str = "rebuild"
    reason: str = ""
    chunk_rows: int = 50_000

    def resolved(self, zones, replicated_tables) -> CopyRequest:
        """This request checked against the mesh (zone names, the rule set's tables), with
        its tables spelled out; CopyRefused names the first thing wrong."""
        check_shape(self)
        known = sorted(zones)
        for field, zone in (("from", self.source_zone), ("to", self.target_zone)):
            if zone not in zones:
                raise CopyRefused(f"{field}: unknown zone {zone!r}; the zones are {', '.join(known)}")
        if not replicated_tables:
            raise CopyRefused("tables: the rule set declares no table; publish rules with a tables: section first")
        resident = [t for t in self.tables if getattr(replicated_tables.get(t), "resident", False)]
        if resident:
            raise CopyRefused(f"tables: {', '.join(resident)} resident (rows live only in their entity's unit): "
                              "a migration moves them with their entity; leave it out")  # fmt: skip
        replicated = sorted(t for t, s in replicated_tables.items() if not getattr(s, "resident", False))
        if not replicated:
            raise CopyRefused("tables: every table of the rule set is resident: nothing is replicated to copy")
        unknown = [t for t in self.tables if t not in replicated]
        if unknown:
            raise CopyRefused(
                f"tables: {', '.join(unknown)} not replicated; the rule set's tables are {', '.join(replicated)}"
            )
        tables = tuple(self.tables) or tuple(replicated)
        return CopyRequest(self.source_zone, self.target_zone, tables, self.mode, self.reason, self.chunk_rows)


def check_shape(req: CopyRequest) -> None:
    """What can be checked without the mesh: spelling, ranges, a reason."""
    for field, zone in (("from", req.source_zone), ("to", req.target_zone)):
        if not is_zone_name(zone):
            raise CopyRefused(f"{field}: {zone!r} is not a zone name (lower-case letters, digits, _; e.g. 'a')")
    if req.source_zone == req.target_zone:
        raise CopyRefused(f"to: the target is the source ({req.source_zone!r}); copy from a healthy other zone")
    if req.mode not in MODES:
        raise CopyRefused(f"mode: {req.mode!r} is not one of {', '.join(MODES)}")
    if len(set(req.tables)) != len(req.tables):
        raise CopyRefused("tables: a table is named twice; name each once")
    for t in req.tables:
        if not is_ident(t):
            raise CopyRefused(f"tables: {t!r} is not a plain table name")
    if not isinstance(req.reason, str) or not req.reason.strip():
        raise CopyRefused("reason: say why (kept in the copy history), e.g. --reason 'rebuild b after disk loss'")
    if len(req.reason) > 500:
        raise CopyRefused("reason: longer than 500 characters; shorten it")
    if not isinstance(req.chunk_rows, int) or not 100 <= req.chunk_rows <= 10_000_000:
        raise CopyRefused(f"chunk_rows: {req.chunk_rows!r} is out of range; use 100..10000000")
