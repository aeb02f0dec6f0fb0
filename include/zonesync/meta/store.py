"""Versions of rules and entity flags: publish, load, diff; zones; the audit log.

Publishing is one meta transaction: lock the head row, take head + 1, run the
rule check against the zones the store knows, write the version, its ZSID rules
and the audit entry, move the head. Two publishers serialise on the head row,
so versions are strictly increasing with no gaps and no version is ever visible
half-written. A guard that sees head = V loads "the newest rules <= V plus the
entity flags as of V", which is therefore always a complete, checked state.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from zonesync.meta.db import MetaConfig, MetaError
from zonesync.rules.check import check as rule_check
from zonesync.rules.model import RuleSet, parse


def default_actor() -> str:
    return os.environ.get("ZONESYNC_ACTOR") or f"{getpass.getuser()}@{socket.gethostname()}"


@dataclass(frozen=True)
class Entity:
    le_type: str
    le_id: str
    unit_zone: str
    stop_write: bool
    version: int


@dataclass(frozen=True)
class VersionInfo:
    version: int
    kind: str
    author: str
    reason: str
    created_at: object


def record_units(cur, version: int, units: list[tuple[str, str, int, bool]]) -> None:
    """Each entity's unit as of `version` ((le_type, le_id, zone id, stop_write)), appended to
    the units' history (meta migration 0015) in the version's transaction."""
    cur.executemany(
        "INSERT INTO entity_units (version, le_type, le_id, unit_zone, stop_write) VALUES (%s, %s, %s, %s, %s)",
        [(version, t, i, z, int(s)) for t, i, z, s in units],
    )


def audit(cur, actor: str, action: str, detail: dict, version: int | None = None) -> None:
    cur.execute(
        "INSERT INTO audit_log (actor, action, version, detail) VALUES (%s, %s, %s, %s)",
        (actor, action, version, json.dumps(detail, sort_keys=True, default=str)),
    )


class MetaStore:
    def __init__(self, meta: MetaConfig):
        self.meta = meta

    def connect(self):
        return self.meta.connect()

    # -- zones -------------------------------------------------------------
    def ensure_zones(self, zones: list[tuple[int, str]], actor: str | None = None) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                for zone_id, name in zones:
                    cur.execute("SELECT name FROM zones WHERE zone_id = %s", (zone_id,))
                    row = cur.fetchone()
                    if row and row[0] != name:
                        raise MetaError(f"zone id {zone_id} is already {row[0]!r} in the meta store, not {name!r}")
                    if not row:
                        cur.execute("INSERT INTO zones (zone_id, name) VALUES (%s, %s)", (zone_id, name))
                        audit(cur, actor or default_actor(), "zone.add", {"zone_id": zone_id, "name": name})
        finally:
            conn.close()

    def zones(self) -> dict[str, int]:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT name, zone_id FROM zones")
                return {name: int(zid) for name, zid in cur.fetchall()}
        finally:
            conn.close()

    # -- versions ----------------------------------------------------------
    @contextmanager
    def _next_version(self):
        """Lock the head row and yield (cursor, head + 1, zone ids by name); on success move
        the head and commit, on any error roll everything back. Publishers serialise here."""
        with self.meta.transaction() as cur:
            cur.execute("SELECT version FROM head WHERE id = 1 FOR UPDATE")
            version = int(cur.fetchone()[0]) + 1
            cur.execute("SELECT name, zone_id FROM zones")
            zone_ids = {name: int(zid) for name, zid in cur.fetchall()}
            yield cur, version, zone_ids
            cur.execute("UPDATE head SET version = %s WHERE id = 1", (version,))

    def head(self) -> int:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT version FROM head WHERE id = 1")
                row = cur.fetchone()
                return int(row[0]) if row else 0
        finally:
            conn.close()

    def publish_rules(
        self,
        rules: RuleSet,
        reason: str,
        author: str | None = None,
        require_writable: bool = True,
        based_on: int | None = None,
        lease_holder: str | None = None,
        precondition: Callable | None = None,
    ) -> int:
        """Check and store `rules` as the next version; return the version number.

        Under the head-row lock: with `based_on`, refuse (RulesChanged) when the newest
        rules version is no longer the one the caller computed `rules` from, so a stale
        read can never overwrite a concurrent change; and refuse any change to ZSIDs
        leased to a switch other than `lease_holder`. `precondition(cursor)` runs in the
        same transaction and may lock and check the caller's own rows, raising to refuse
        (a zone switch checks that no rollback has claimed it).
        """
        if not reason or not reason.strip():
            raise MetaError("a reason is required for every rules change: pass --reason '...'")
        author = author or default_actor()
        with self._next_version() as (cur, version, zone_ids):
            rule_check(rules, set(zone_ids), require_writable=require_writable)
            cur.execute("SELECT version, rule_set FROM versions WHERE kind = 'rules' ORDER BY version DESC LIMIT 1")
            newest = cur.fetchone()
            if based_on is not None and (newest[0] if newest else 0) != based_on:
                raise RulesChanged(f"rules moved from version {based_on} to {newest[0] if newest else 0} meanwhile")
            if newest is not None:
                _check_leases(cur, parse(json.loads(newest[1]), "head"), rules, lease_holder)
            if precondition is not None:
                precondition(cur)
            doc = json.dumps(rules.to_doc(), sort_keys=True)
            cur.execute(
                "INSERT INTO versions (version, kind, author, reason, rule_set) VALUES (%s, 'rules', %s, %s, %s)",
                (version, author, reason, doc),
            )
            cur.executemany(
                "INSERT INTO zsid_rules (version, zsid_lo, zsid_hi, owner_zone, status) VALUES (%s,%s,%s,%s,%s)",
                [(version, r.lo, r.hi, zone_ids[r.zone], r.status) for r in rules.rules],
            )
            audit(cur, author, "rules.publish", {"reason": reason, "rules": rules.to_doc()["rules"]}, version)
        return version

    def rules_at(self, version: int | None = None) -> tuple[int, RuleSet] | None:
        """The newest rules version <= `version` (default: newest), or None."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                if version is None:
                    cur.execute(
                        "SELECT version, rule_set FROM versions WHERE kind = 'rules' ORDER BY version DESC LIMIT 1"
                    )
                else:
                    cur.execute(
                        "SELECT version, rule_set FROM versions WHERE kind = 'rules' AND version <= %s "
                        "ORDER BY version DESC LIMIT 1",
                        (version,),
                    )
                row = cur.fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        return int(row[0]), parse(json.loads(row[1]), f"rules version {row[0]}")

    def rules_after(self, version: int) -> list[tuple[int, float, RuleSet]]:
        """Rules versions newer than `version`, oldest first: (version, published at as epoch
        seconds, rules): what an applier's owner history (apply/loop/owner_history.py) adds."""
        rows, _ = self.meta.run(
            "SELECT version, UNIX_TIMESTAMP(created_at), rule_set FROM versions "
            "WHERE kind = 'rules' AND version > %s ORDER BY version",
            (version,),
        )
        return [(int(v), float(t), parse(json.loads(doc), f"rules version {v}")) for v, t, doc in rows]

    def entity_units_after(self, version: int) -> list[tuple[int, float, str, str, str]]:
        """Entity units published in versions newer than `version`, oldest first: (version,
        published at as epoch seconds, le_type, le_id, unit zone name): what an applier's
        owner history adds beside the rules (apply/loop/owner_history.py)."""
        rows, _ = self.meta.run(
            "SELECT u.version, UNIX_TIMESTAMP(v.created_at), u.le_type, u.le_id, z.name FROM entity_units u "
            "JOIN versions v ON v.version = u.version JOIN zones z ON z.zone_id = u.unit_zone "
            "WHERE u.version > %s ORDER BY u.version",
            (version,),
        )
        return [(int(v), float(t), le_type, le_id, zone) for v, t, le_type, le_id, zone in rows]

    def rules_version(self, version: int) -> RuleSet:
        """Exactly rules version `version` (for show/diff); an error names what exists."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT kind, rule_set FROM versions WHERE version = %s", (version,))
                row = cur.fetchone()
        finally:
            conn.close()
        if row is None or row[0] != "rules":
            what = "does not exist" if row is None else f"is an {row[0]} version"
            raise MetaError(f"version {version} {what}: `zonesync rules show` lists the rules versions")
        return parse(json.loads(row[1]), f"rules version {version}")

    def history(self, limit: int = 20) -> list[VersionInfo]:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT version, kind, author, reason, created_at FROM versions ORDER BY version DESC LIMIT %s",
                    (limit,),
                )
                return [VersionInfo(*row) for row in cur.fetchall()]
        finally:
            conn.close()

    # -- tag rules (zonesync/tagging) ----------------------------------------
    def publish_tags(self, tags, reason: str, author: str | None = None) -> int:
        """Store checked tag rules (tagging.rules.TagRules) as the next version (kind 'tags')."""
        if not reason or not reason.strip():
            raise MetaError("a reason is required for every tag rules change: pass --reason '...'")
        author = author or default_actor()
        with self._next_version() as (cur, version, _):
            doc = json.dumps(tags.to_doc(), sort_keys=True)
            cur.execute(
                "INSERT INTO versions (version, kind, author, reason, rule_set) VALUES (%s, 'tags', %s, %s, %s)",
                (version, author, reason, doc),
            )
            audit(cur, author, "tags.publish", {"reason": reason}, version)
        return version

    def tags_at(self, version: int | None = None):
        """(version, TagRules) of the newest tag rules <= `version` (default: newest), or None."""
        from zonesync.tagging.rules import parse as parse_tags

        rows, _ = self.meta.run(
            "SELECT version, rule_set FROM versions WHERE kind = 'tags' AND version <= %s "
            "ORDER BY version DESC LIMIT 1",
            (version if version is not None else 2**62,),
        )
        if not rows:
            return None
        return int(rows[0][0]), parse_tags(json.loads(rows[0][1]), f"tag rules version {rows[0][0]}")

    # -- locating entities ---------------------------------------------------
    def publish_entities(self, changes: list[dict], reason: str, author: str | None = None) -> int:
        """Upsert entities (le_type, le_id, unit_zone, stop_write) as one new version."""
        author = author or default_actor()
        with self._next_version() as (cur, version, zone_ids):
            for i, ch in enumerate(changes):
                if ch["unit_zone"] not in zone_ids:
                    raise MetaError(f"changes[{i}].unit_zone: unknown zone {ch['unit_zone']!r}")
            cur.execute(
                "INSERT INTO versions (version, kind, author, reason) VALUES (%s, 'entities', %s, %s)",
                (version, author, reason),
            )
            cur.executemany(
                "INSERT INTO locating_entities (le_type, le_id, unit_zone, stop_write, version) "
                "VALUES (%s,%s,%s,%s,%s) ON DUPLICATE KEY UPDATE unit_zone = VALUES(unit_zone), "
                "stop_write = VALUES(stop_write), version = VALUES(version)",
                [
                    (c["le_type"], str(c["le_id"]), zone_ids[c["unit_zone"]], int(bool(c.get("stop_write"))), version)
                    for c in changes
                ],
            )
            record_units(cur, version, [(c["le_type"], str(c["le_id"]), zone_ids[c["unit_zone"]],
                                         bool(c.get("stop_write"))) for c in changes])  # fmt: skip
            audit(cur, author, "entities.publish", {"reason": reason, "changes": changes}, version)
        return version

    def entities(self) -> list[Entity]:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT e.le_type, e.le_id, z.name, e.stop_write, e.version "
                    "FROM locating_entities e JOIN zones z ON z.zone_id = e.unit_zone"
                )
                return [Entity(t, i, z, bool(s), int(v)) for t, i, z, s, v in cur.fetchall()]
        finally:
            conn.close()


class RulesChanged(MetaError):
    """The rules moved on since the caller read them: recompute and try again."""


class LeasedZsids(MetaError):
    pass


def _clip(rules: RuleSet, lo: int, hi: int) -> list[tuple[int, int, str, str]]:
    return sorted((max(lo, r.lo), min(hi, r.hi), r.zone, r.status) for r in rules.rules if r.lo <= hi and r.hi >= lo)


def _check_leases(cur, head: RuleSet, new: RuleSet, holder: str | None) -> None:
    """A publisher may change leased ZSIDs only when it holds their lease."""
    try:
        cur.execute("SELECT holder, kind, zsid_lo, zsid_hi FROM zsid_leases")
    except Exception:  # noqa: BLE001 - a meta store migrated before leases existed has none
        return
    for other, kind, lo, hi in cur.fetchall():
        if other != holder and _clip(head, int(lo), int(hi)) != _clip(new, int(lo), int(hi)):
            raise LeasedZsids(
                f"ZSIDs {lo}-{hi} are leased to {kind} {other}: wait for it to end (`zonesync switches`), "
                "then publish again"
            )


def diff(a: RuleSet, b: RuleSet) -> list[str]:
    """Per-ZSID-range differences of owner/status between two rule sets, plus table changes."""
    from zonesync.rules.extract import RuleIndex

    ia, ib = RuleIndex(a), RuleIndex(b)
    cuts = {a.zsid_min, b.zsid_min, a.zsid_max + 1, b.zsid_max + 1}
    for r in (*a.rules, *b.rules):
        cuts.update((r.lo, r.hi + 1))
    edges = sorted(cuts)
    lines: list[str] = []
    for lo, nxt in zip(edges, edges[1:], strict=False):
        hi = nxt - 1

        def at(index: RuleIndex, zsid: int) -> str:
            try:
                rule = index.rule_for(zsid)
            except LookupError:
                return "(none)"
            return f"{rule.zone} {rule.status}"

        before, after = at(ia, lo), at(ib, lo)
        if before != after:
            zs = str(lo) if lo == hi else f"{lo}-{hi}"
            lines.append(f"ZSIDs {zs}: {before} -> {after}")
    for name in sorted(set(a.tables) | set(b.tables)):
        ta, tb = a.tables.get(name), b.tables.get(name)
        if ta != tb:
            lines.append(f"table {name}: {'added' if ta is None else 'removed' if tb is None else 'changed'}")
    if a.txn_deadline_ms != b.txn_deadline_ms:
        lines.append(f"txn_deadline_ms: {a.txn_deadline_ms} -> {b.txn_deadline_ms}")
    return lines
