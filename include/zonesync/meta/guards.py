"""The guard registry (PiMMS side of Keepalive) and push-and-wait.

Health is derived, never stored: an instance is unhealthy when its last
heartbeat is older than 4 of its own periods (the seed's "连续 4 个周期"), judged
by the meta store's clock so guard clocks do not matter.

Push and wait is how every protocol step changes the rules: refuse to start
while an instance of an affected zone is unhealthy (the seed: fix the instance
first), publish the version, then wait until every healthy instance of the
affected zones has acked it. A timeout names the laggards and what they run;
the caller decides to roll back (BLOCK, RESHARDING) or retry (ACTIVE).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from zonesync.meta.db import MetaConfig, MetaError
from zonesync.meta.store import MetaStore
from zonesync.rules.model import RuleSet

MISSED_BEATS_UNHEALTHY = 4


class UnhealthyGuards(MetaError):
    pass


class AckTimeout(MetaError):
    def __init__(self, version: int, laggards: list[GuardInstance], timeout: float):
        self.version = version
        self.laggards = laggards
        self.lagging = ", ".join(f"{g.instance_id} (zone {g.zone}, runs v{g.version_applied})" for g in laggards)
        super().__init__(f"version {version} not acked within {timeout:.1f} s by: {self.lagging}")


@dataclass(frozen=True)
class GuardInstance:
    instance_id: str
    zone: str
    host: str
    pid: int
    started_at: object
    last_heartbeat: object
    period_ms: int
    version_applied: int
    heartbeat_age_ms: float

    @property
    def healthy(self) -> bool:
        return self.heartbeat_age_ms <= MISSED_BEATS_UNHEALTHY * self.period_ms


def list_instances(meta: MetaConfig, zones: set[str] | None = None) -> list[GuardInstance]:
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT g.instance_id, z.name, g.host, g.pid, g.started_at, g.last_heartbeat, g.period_ms, "
                "g.version_applied, TIMESTAMPDIFF(MICROSECOND, g.last_heartbeat, NOW(6)) / 1000 "
                "FROM guard_instances g JOIN zones z ON z.zone_id = g.zone_id ORDER BY z.name, g.instance_id"
            )
            rows = [GuardInstance(*r[:8], float(r[8])) for r in cur.fetchall()]
    finally:
        conn.close()
    return [g for g in rows if zones is None or g.zone in zones]


def require_healthy(meta: MetaConfig, zones: set[str]) -> list[GuardInstance]:
    instances = list_instances(meta, zones)
    sick = [g for g in instances if not g.healthy]
    if sick:
        names = ", ".join(
            f"{g.instance_id} (zone {g.zone}, last heartbeat {g.heartbeat_age_ms / 1000:.1f} s ago)" for g in sick
        )
        raise UnhealthyGuards(
            f"refusing to change rules while guard instances are unhealthy: {names}: "
            "restart them, or remove dead ones with `zonesync guards forget ID`"
        )
    return instances


def wait_acks(
    meta: MetaConfig, version: int, zones: set[str], timeout: float, poll: float = 0.02, unhealthy_too: bool = False
) -> float:
    """Block until every healthy instance in `zones` runs >= version; return seconds waited.

    With `unhealthy_too`, every registered instance must ack, healthy or not: a zone
    switch's BLOCK and RESHARDING treat an instance that stopped heartbeating as one
    that has not acked, and fail (to roll back) instead of skipping it (seed cases
    3.2, 3.4, 4.1).
    """
    started = time.monotonic()
    while True:
        instances = list_instances(meta, zones)
        laggards = [g for g in instances if (unhealthy_too or g.healthy) and g.version_applied < version]
        if not laggards:
            return time.monotonic() - started
        if time.monotonic() - started >= timeout:
            raise AckTimeout(version, laggards, timeout)
        time.sleep(poll)


def push_and_wait(
    meta: MetaConfig,
    rules: RuleSet,
    reason: str,
    zones: set[str] | None = None,
    timeout: float = 10.0,
    author: str | None = None,
    require_writable: bool = True,
) -> int:
    """Publish `rules` and wait for the acks of the affected zones' guards.

    `zones` defaults to every zone the rules name. Unhealthy instances there stop
    the change before anything is published.
    """
    affected = set(zones) if zones is not None else rules.zones()
    require_healthy(meta, affected)
    version = MetaStore(meta).publish_rules(rules, reason, author, require_writable=require_writable)
    wait_acks(meta, version, affected, timeout)
    return version


def forget(meta: MetaConfig, instance_id: str, actor: str) -> bool:
    """Remove a dead instance's registration (after an operator confirmed it is gone)."""
    from zonesync.meta.store import audit

    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            n = cur.execute("DELETE FROM guard_instances WHERE instance_id = %s", (instance_id,))
            if n:
                audit(cur, actor, "guard.forget", {"instance_id": instance_id})
            return bool(n)
    finally:
        conn.close()
