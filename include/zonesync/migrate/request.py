"""A migration's request: what a user asks for, checked before anything changes.

Every refusal is one line naming the field and the fix (MigrationRefused); nothing is
written before the whole request is known to be valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.meta.db import MetaError
from zonesync.meta.entities import check_ref

MODES = ("plan1", "plan2")  # plan1: stock + incremental + a short stop-write; plan2: stop-write + copy


class MigrationRefused(ValueError):
    """A migration that must not start (or go on): the message says why and what to do."""


class UnknownBizEntity(MigrationRefused):
    """The biz entity is not registered (the HTTP API's 404)."""


class AlreadyMigrating(MigrationRefused):
    """Another migration of the biz entity runs (the HTTP API's 409)."""


@dataclass(frozen=True)
class MigrationRequest:
    be_type: str
    be_id: str
    target_zone: str
    mode: str = "plan1"
    reason: str = ""
    # some of the biz entity's locating entities, moved together as one run (S004-30: a biz
    # entity too big to stop at once moves LE by LE, each run atomic); empty: all of them
    les: tuple[tuple[str, str], ...] = ()

    def check(self, zones) -> None:
        """MigrationRefused naming the first field that is wrong."""
        try:
            check_ref("biz entity", self.be_type, self.be_id, "tenant")
        except MetaError as exc:
            raise MigrationRefused(str(exc)) from None
        if self.target_zone not in zones:
            raise MigrationRefused(f"to: unknown zone {self.target_zone!r}; the zones are {', '.join(sorted(zones))}")
        if self.mode == "dual-write":
            raise MigrationRefused("mode: dual-write is refused (seed 004: two writable units for one entity break "
                                   "its order and its unique keys); use plan1 or plan2")  # fmt: skip
        if self.mode not in MODES:
            raise MigrationRefused(f"mode: {self.mode!r} is not one of {', '.join(MODES)}")
        if not self.reason.strip():
            raise MigrationRefused("reason: say why (it is audited with every version the migration publishes)")
        for le_type, le_id in self.les:
            try:
                check_ref("locating entity", le_type, le_id, "les")
            except MetaError as exc:
                raise MigrationRefused(str(exc)) from None
        if len(set(self.les)) != len(self.les):
            raise MigrationRefused("les: a locating entity is named twice; name each once")


def parse_les(values) -> tuple[tuple[str, str], ...]:
    """["chat:70", ...] (the CLI's --le, the API's and the DAG's `les`) as ((type, id), ...);
    MigrationRefused naming the bad one."""
    out = []
    for value in values or ():
        le_type, sep, le_id = str(value).partition(":")
        if not sep or not le_type or not le_id:
            raise MigrationRefused(f"les: {value!r} is not TYPE:ID (e.g. chat:70)")
        out.append((le_type, le_id))
    return tuple(out)
