"""The entity registry in Global Meta (seed 004 §4: Biz Entity, Locating Entity).

A biz entity (a tenant: the smallest unit an admin migrates) owns locating entities (the
tenant itself, each chat or project of it). Each has a home unit (zone), a status and the
version that last changed it; every change is one new version of the meta store, audited
(the guards, which follow the head version, see it at once). Sub-entities (rows and keys
that follow a locating entity) are the tag rules' business (zonesync/tagging).

The guard enforces a registered locating entity's unit and stop-write flag
(dal/state.py); routing.py answers "where is it" for applications and the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from zonesync.meta.db import MetaError
from zonesync.meta.store import MetaStore, audit, default_actor, record_units
from zonesync.rules.extract import RuleIndex, ZsidUnknown, integer_text
from zonesync.rules.model import parse
from zonesync.sql_names import is_ident

STATUSES = ("ACTIVE", "MIGRATING", "SYNCING", "STOP_WRITE")
MAX_ID = 128  # characters of an entity id (locating_entities.le_id)


@dataclass(frozen=True)
class Registered:
    """A registered locating entity, with the biz entity it belongs to (if any)."""

    le_type: str
    le_id: str
    zone: str
    status: str
    stop_write: bool
    version: int
    be_type: str | None
    be_id: str | None


@dataclass(frozen=True)
class BizEntity:
    be_type: str
    be_id: str
    zone: str
    status: str
    version: int


def check_ref(kind: str, type_: str, id_: str, where: str) -> None:
    """A type must be a plain name, an id non-empty text of at most MAX_ID characters."""
    if not is_ident(type_) or len(type_) > 32:
        raise MetaError(f"{where}: {kind} type {type_!r} must be a plain name (letters, digits, _; at most 32)")
    if not isinstance(id_, str) or not id_ or len(id_) > MAX_ID or not id_.isprintable():
        raise MetaError(f"{where}: {kind} id {id_!r} must be printable text of 1 to {MAX_ID} characters")


def _keeps_biz_row(cur, be_type: str, be_id: str, zone: str, les: list[tuple[str, str]], status: str,
                   migration: bool) -> bool:  # fmt: skip
    """Whether this version leaves the biz entity's own row (its zone and status) as it is:
    it follows its LEs when all of them are in one zone. So a migration moving some of its
    LEs (S004-30) changes it only with the lift that brings the last of them to the zone
    (its stop, flip and rollback never do: the biz entity is never shown stopped for the
    LEs that go on), and an operator's new LE in another zone than the others leaves it."""
    cur.execute("SELECT e.le_type, e.le_id, z.name FROM locating_entities e JOIN zones z ON z.zone_id = e.unit_zone "
                "WHERE e.be_type = %s AND e.be_id = %s", (be_type, be_id))  # fmt: skip
    moving = {tuple(le) for le in les}
    others = [z for t, i, z in cur.fetchall() if (t, i) not in moving]
    if not others:
        return False
    elsewhere = any(z != zone for z in others)
    return elsewhere or (migration and status != "ACTIVE")


class EntityRegistry(MetaStore):
    _LE_COLUMNS = (
        "SELECT e.le_type, e.le_id, z.name, e.status, e.stop_write, e.version, e.be_type, e.be_id "
        "FROM locating_entities e JOIN zones z ON z.zone_id = e.unit_zone"
    )

    def register_biz(self, be_type: str, be_id: str, zone: str, les: list[tuple[str, str]], reason: str,
                     status: str = "ACTIVE", author: str | None = None, new: bool = False,
                     within: Callable | None = None) -> int:  # fmt: skip
        """The biz entity (be_type, be_id) in `zone` with its locating entities `les`, as one
        new version. A locating entity another biz entity owns is refused (moving it between
        owners is a migration's work); `zone` must be a known zone.

        Who may write an LE changes here, so an operator's registration (`within` None) may
        not move it: the registration of an LE registered in another zone is refused, and of
        an LE the ZSID rules place in another zone too unless `new` (it has no rows yet: no
        write of it was accepted there). While a migration of the biz entity runs, only new
        LEs may be registered, in the run's target once it has flipped (S004-31: they join
        the tenant where it ends up; the biz entity's row is left as the run published it);
        anything else is refused. A migration moves them (migrate/steps.py), passing
        `within(cur, version)`, which runs in this version's transaction (to check the run's
        phase and record the version with it, or raise to publish nothing)."""
        check_ref("biz entity", be_type, be_id, "register")
        for le_type, le_id in les:
            check_ref("locating entity", le_type, le_id, "register")
        if status not in STATUSES:
            raise MetaError(f"register: status {status!r} is not one of {', '.join(STATUSES)}")
        if not reason or not reason.strip():
            raise MetaError("a reason is required for every entity change: pass --reason '...'")
        author = author or default_actor()
        with self._next_version() as (cur, version, zone_ids):
            if zone not in zone_ids:
                raise MetaError(f"register: unknown zone {zone!r} (zones: {', '.join(sorted(zone_ids))})")
            for le_type, le_id in les:
                cur.execute(
                    "SELECT be_type, be_id FROM locating_entities WHERE le_type = %s AND le_id = %s FOR UPDATE",
                    (le_type, le_id),
                )
                row = cur.fetchone()
                if row and row[0] is not None and (row[0], row[1]) != (be_type, be_id):
                    raise MetaError(f"register: {le_type} {le_id} belongs to {row[0]} {row[1]}: a locating entity "
                                    "has one biz entity (move it with a migration)")  # fmt: skip
            _refuse_another_spelling(cur, les)
            during = None  # the migration run this registration joins (new LEs in its target)
            if within is None:
                during = _refuse_a_move(cur, be_type, be_id, zone, les, new)
            else:
                within(cur, version)
            cur.execute(
                "INSERT INTO versions (version, kind, author, reason) VALUES (%s, 'entities', %s, %s)",
                (version, author, reason),
            )
            keep = _keeps_biz_row(cur, be_type, be_id, zone, les, status, migration=within is not None)
            if during is None and not keep:  # (during a run the biz entity's unit and status are the run's)
                cur.execute(
                    "INSERT INTO biz_entities (be_type, be_id, unit_zone, status, version) VALUES (%s, %s, %s, %s, "
                    "%s) ON DUPLICATE KEY UPDATE unit_zone = VALUES(unit_zone), status = VALUES(status), "
                    "version = VALUES(version)",
                    (be_type, be_id, zone_ids[zone], status, version),
                )
            cur.executemany(
                "INSERT INTO locating_entities (le_type, le_id, unit_zone, status, stop_write, version, be_type, "
                "be_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE unit_zone = VALUES(unit_zone), "
                "status = VALUES(status), stop_write = VALUES(stop_write), version = VALUES(version), "
                "be_type = VALUES(be_type), be_id = VALUES(be_id)",
                [(t, i, zone_ids[zone], status, int(status == "STOP_WRITE"), version, be_type, be_id) for t, i in les],
            )
            record_units(cur, version, [(t, i, zone_ids[zone], status == "STOP_WRITE") for t, i in les])
            audit(cur, author, "entities.register",
                  {"reason": reason, "biz": [be_type, be_id], "zone": zone, "status": status,
                   "locating": [list(le) for le in les], **({"during_migration": during} if during else {})},
                  version)  # fmt: skip
        return version

    def locate(self, le_type: str, le_id: str) -> Registered | None:
        rows = self._select(f"{self._LE_COLUMNS} WHERE e.le_type = %s AND e.le_id = %s", (le_type, le_id))
        return rows[0] if rows else None

    def biz(self, be_type: str, be_id: str) -> tuple[BizEntity, list[Registered]] | None:
        rows, _ = self.meta.run(
            "SELECT b.be_type, b.be_id, z.name, b.status, b.version FROM biz_entities b "
            "JOIN zones z ON z.zone_id = b.unit_zone WHERE b.be_type = %s AND b.be_id = %s",
            (be_type, be_id),
        )
        if not rows:
            return None
        row = rows[0]
        les = self._select(f"{self._LE_COLUMNS} WHERE e.be_type = %s AND e.be_id = %s ORDER BY e.le_type, e.le_id",
                           (be_type, be_id))  # fmt: skip
        return BizEntity(row[0], row[1], row[2], row[3], int(row[4])), les

    def listed(self, le_type: str | None = None, zone: str | None = None, limit: int = 1000) -> list[Registered]:
        sql, args = f"{self._LE_COLUMNS} WHERE 1 = 1", []
        if le_type:
            sql, args = sql + " AND e.le_type = %s", [*args, le_type]
        if zone:
            sql, args = sql + " AND z.name = %s", [*args, zone]
        return self._select(sql + " ORDER BY e.le_type, e.le_id LIMIT %s", (*args, limit))

    def _select(self, sql: str, args) -> list[Registered]:
        rows, _ = self.meta.run(sql, args)
        return [Registered(t, i, z, st, bool(sw), int(v), bt, bi) for t, i, z, st, sw, v, bt, bi in rows]


def _newest_rules(cur) -> RuleIndex | None:
    cur.execute("SELECT rule_set FROM versions WHERE kind = 'rules' ORDER BY version DESC LIMIT 1")
    row = cur.fetchone()
    return None if row is None else RuleIndex(parse(json.loads(row[0]), "the newest rules"))


def _refuse_another_spelling(cur, les: list[tuple[str, str]]) -> None:
    """MetaError for an LE id that spells an integer another way ('07', '+7') when a table
    of the rules takes its ZSID from that entity type's integer id: its rows' column holds
    7, the registry would hold '07', and the guard would never match the two."""
    index = None
    for le_type, le_id in les:
        canonical = integer_text(le_id)
        if canonical is None or canonical == le_id:
            continue
        index = index or _newest_rules(cur)
        if index is not None and index.entity_zsid(le_type, canonical) is not None:
            raise MetaError(f"register: {le_type} id {le_id!r} spells the integer {canonical} another way; "
                            f"register it as {canonical}")  # fmt: skip


def _refuse_a_move(cur, be_type: str, be_id: str, zone: str, les: list[tuple[str, str]], new: bool) -> str | None:
    """MetaError when an operator's registration would change who may write an LE (in the
    registration's transaction: the head row is locked, so neither the rules nor the
    registry move meanwhile). Only a migration moves an LE: it stops its writes everywhere,
    waits for their last data and verifies it first (docs/migration.md). The id of the
    migration run the registration joins (new LEs in its target, `_during_a_run`), else
    None."""
    during = _during_a_run(cur, be_type, be_id, zone, les)
    index, rules_read = None, False
    for le_type, le_id in les:
        cur.execute("SELECT z.name FROM locating_entities e JOIN zones z ON z.zone_id = e.unit_zone "
                    "WHERE e.le_type = %s AND e.le_id = %s", (le_type, le_id))  # fmt: skip
        row = cur.fetchone()
        if row is not None:
            if row[0] != zone:
                raise MetaError(f"register: {le_type} {le_id} is in zone {row[0]}: moving it to {zone} is a "
                                f"migration (`zonesync migrate --tenant {be_id} --to {zone}`)")  # fmt: skip
            continue
        if new:
            continue
        if not rules_read:
            index, rules_read = _newest_rules(cur), True
        owner = None if index is None else _zsid_owner(index, le_type, le_id)
        if owner is not None and owner != zone:
            raise MetaError(f"register: the rules place {le_type} {le_id} in zone {owner}, where its rows are written: "
                            "register it there and migrate it, or pass --new if it has no rows yet")  # fmt: skip
    return during


def _during_a_run(cur, be_type: str, be_id: str, zone: str, les: list[tuple[str, str]]) -> str | None:
    """None when no migration of the biz entity runs. While one runs (S004-31), the run's id
    when every LE is new (registered nowhere yet) and `zone` is the run's target and the
    run has flipped; anything else is a MetaError naming what to do.

    The run's row is read with a shared lock in the registration's transaction, after the
    head row's lock: the flip publishes the LEs' new unit and records flip_version in one
    commit that holds both (MigrationStore.publishing), so this sees the flip whole or not
    at all. Past the flip the tenant ends in the target: no rollback can follow a flip
    (claim_phase makes 'flipping' and 'rolling_back' exclusive; a rollback after it rolls
    forward), so a new LE registered there is never left behind. The run's later publishes
    (flip retried, lift) register only the run's own LEs (its les_json, read at preflight),
    so they neither stop nor move it, and its release purges only their resident rows.
    Before the flip the LEs' unit may still go either way: refused, to wait."""
    cur.execute("SELECT run_id, source_zone, target_zone, flip_version FROM migrations WHERE be_type = %s AND "
                "be_id = %s AND status = 'running' LOCK IN SHARE MODE", (be_type, be_id))  # fmt: skip
    running = cur.fetchone()
    if running is None:
        return None
    run_id, source, target, flip_version = running
    being = f"register: {be_type} {be_id} is being migrated ({run_id}, {source} -> {target})"
    if flip_version is None:
        raise MetaError(f"{being} and has not flipped yet: wait for the migration or roll it back, then register "
                        f"again (a new locating entity can be registered in zone {target} once the run has "
                        "flipped)")  # fmt: skip
    if zone != target:
        raise MetaError(f"{being}, past its flip: register its new locating entities in zone {target}, its unit "
                        f"now, not in {zone}")  # fmt: skip
    if not les:
        raise MetaError(f"{being}: only new locating entities can be registered while it runs (none given)")
    for le_type, le_id in les:
        cur.execute("SELECT z.name FROM locating_entities e JOIN zones z ON z.zone_id = e.unit_zone "
                    "WHERE e.le_type = %s AND e.le_id = %s", (le_type, le_id))  # fmt: skip
        found = cur.fetchone()
        if found is not None:
            raise MetaError(f"{being}: {le_type} {le_id} is registered already (zone {found[0]}); only a new "
                            "locating entity can be registered while it runs: change this one after the "
                            "migration")  # fmt: skip
    return run_id


def _zsid_owner(index: RuleIndex, le_type: str, le_id: str) -> str | None:
    """The zone the ZSID rules give an LE's rows, or None when no table places it."""
    try:
        found = index.entity_zsid(le_type, le_id)
        return None if found is None else index.rule_for(found[1]).zone
    except ZsidUnknown:
        return None
