"""Where is a locating entity? (seed 004 §2: 去 Global Meta 查询这个 UserID 的归属于哪个 Unit)

    from zonesync.routing import Router
    router = Router(MetaConfig.from_env())
    router.where("tenant", "42")   # Location(zone='b', status='ACTIVE', ...)

The answer is the registry's when the entity is registered (meta/entities.py), else the
ZSID rules' when a declared table takes its ZSID from the entity's id (its `entity`
column is its ZSID column: the rules then say which zone owns every such id), else
`Unknown`, never a guess. Answers are cached and dropped as soon as the meta store's
head version moves (any rules or entity change), which the router reads at most every
`poll_s` seconds: an answer is at most that stale, and the guard, which checks every
write against the version it runs, refuses a write that a stale answer sent to the
wrong zone (WrongZone names the owner).

Forwarding (seed 004 §2's "Cross" requests: a unit that finds a request is not its own
sends it on to the owner, which does not ask Global Meta again). `route` says where a
request received in zone `here` goes: nowhere (None: this zone owns the entity, handle
it), the owner (forward it, marked forwarded), or, for a request already forwarded once,
ForwardRefused: a forwarded request is never forwarded again, so two zones whose answers
disagree for a moment (a stale cache on one side, an LE moving) cannot bounce it between
them; the client retries after at most `poll_s`. A forwarded request is never trusted
either: the guard of the zone it lands in checks every write against the version it runs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from zonesync.meta.db import MetaConfig
from zonesync.meta.entities import EntityRegistry
from zonesync.rules.extract import RuleIndex, ZsidUnknown
from zonesync.rules.model import ACTIVE


class Unknown(LookupError):
    """No registration and no rule locates the entity: say so, never guess."""


class ForwardRefused(LookupError):
    """A forwarded request reached a zone that does not own its entity: not forwarded again."""

    def __init__(self, message: str, owner: str):
        super().__init__(message)
        self.owner = owner


@dataclass(frozen=True)
class Location:
    entity_type: str
    entity_id: str
    zone: str
    status: str  # the registry's status, or the ZSID rule's (ACTIVE, BLOCK, RESHARDING)
    stop_write: bool
    version: int  # the meta version the answer comes from
    how: str  # "registered (tenant 42)" or "by ZSID rule: orders.tenant_id -> ZSID 42"


class Router:
    def __init__(self, meta: MetaConfig, poll_s: float = 1.0, clock=time.monotonic):
        self.registry = EntityRegistry(meta)
        self.poll_s = poll_s
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], Location] = {}
        self._head = -1
        self._head_read = float("-inf")
        self._index: RuleIndex | None = None

    def where(self, entity_type: str, entity_id) -> Location:
        """The entity's zone, or Unknown."""
        entity_id = str(entity_id)
        self._follow_head()
        key = (entity_type, entity_id)
        found = self._cache.get(key)
        if found is None:
            found = self._locate(entity_type, entity_id)
            with self._lock:
                self._cache[key] = found
        return found

    def route(self, entity_type: str, entity_id, here: str, forwarded: bool = False) -> str | None:
        """Where a request for the entity, received in zone `here`, goes: None (here owns it),
        the owner zone to forward it to (once), or ForwardRefused for a request that was
        forwarded already (see above)."""
        owner = self.where(entity_type, entity_id).zone
        if owner == here:
            return None
        if forwarded:
            raise ForwardRefused(f"{entity_type} {entity_id}: forwarded to zone {here}, which answers that zone "
                                 f"{owner} owns it: a forwarded request is not forwarded again; retry from the "
                                 "client (the zones' answers agree within a second)", owner)  # fmt: skip
        return owner

    def _follow_head(self) -> None:
        now = self.clock()
        if now - self._head_read < self.poll_s:
            return
        head = self.registry.head()
        with self._lock:
            self._head_read = now
            if head != self._head:
                self._head, self._cache, self._index = head, {}, None

    def _locate(self, entity_type: str, entity_id: str) -> Location:
        reg = self.registry.locate(entity_type, entity_id)
        if reg is not None:
            biz = f", of {reg.be_type} {reg.be_id}" if reg.be_type else ""
            return Location(entity_type, entity_id, reg.zone, reg.status, reg.stop_write, reg.version,
                            f"registered ({entity_type} {entity_id}{biz})")  # fmt: skip
        if self._index is None:
            found = self.registry.rules_at()
            if found is None:
                raise Unknown(f"{entity_type} {entity_id}: not registered, and no rules are published")
            self._index = RuleIndex(found[1])
        index = self._index
        try:
            placed = index.entity_zsid(entity_type, entity_id)
            if placed is not None:
                spec, zsid = placed
                rule = index.rule_for(zsid)
                return Location(entity_type, entity_id, rule.zone, rule.status, rule.status != ACTIVE, self._head,
                                f"by ZSID rule: {spec.name}.{spec.column} -> ZSID {zsid}")  # fmt: skip
        except ZsidUnknown as exc:
            raise Unknown(f"{entity_type} {entity_id}: not registered, and {exc}") from None
        raise Unknown(f"{entity_type} {entity_id}: not registered, and no table of the rules takes its ZSID from a "
                      f"{entity_type} id: register it (zonesync entity register)")  # fmt: skip


def where(meta: MetaConfig, entity_type: str, entity_id) -> Location:
    """One lookup without a cache (the CLI's); applications keep a Router."""
    return Router(meta, poll_s=0).where(entity_type, entity_id)
