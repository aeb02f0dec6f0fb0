"""Long-running workers: how a replicator or applier is built from the process settings.

A zone's database is ZONESYNC_ZONE_<NAME>_URL (`mysql://user:password@host:port/db`);
the local environment's instance only when that environment is selected
(runtime.endpoints.zone_endpoint, config.dev_selected).
"""

from __future__ import annotations

import gc
import logging
import os
import signal

from zonesync import config
from zonesync.meta.db import MetaConfig
from zonesync.runtime import transport
from zonesync.runtime.endpoints import zone_endpoint


def build_replicator(zone: str, server_id: int | None = None, env: dict | None = None):
    from zonesync.capture.lease import DEFAULT_TTL
    from zonesync.capture.replicator import Replicator
    from zonesync.capture.source import SourceDB

    ep = zone_endpoint(zone, env)
    return Replicator(
        zone=zone,
        zone_id=ep.zone_id,
        source=SourceDB.of(ep),
        meta=MetaConfig.from_env(env),
        server_id=server_id or 4000 + ep.zone_id,
        partitions=transport.partitions(env),
        lease_ttl=_seconds(env, "ZONESYNC_REPLICATOR_LEASE_S", DEFAULT_TTL),
    )


def _flag(env: dict | None, name: str, default: bool = False) -> bool:
    text = ((env if env is not None else os.environ).get(name) or "").strip().lower()
    if not text:
        return default
    if text in ("0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise config.ConfigError(f"{name}={text!r}: give 1 or 0 (true/false, yes/no, on/off)")


def _seconds(env: dict | None, name: str, default: float) -> float:
    text = (env if env is not None else os.environ).get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise config.ConfigError(f"{name}={text!r}: give a positive number of seconds, e.g. {default:g}")
    return value


def parse_table_weights(text: str | None, source: str = "--table-weights") -> dict[str, int]:
    """'tenants=1,orders=2' -> {'tenants': 1, 'orders': 2}; unlisted tables weigh 0."""
    weights: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        table, sep, value = part.partition("=")
        if not sep or not table.strip() or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"{source}: {part!r} is not TABLE=INTEGER (example: tenants=1,orders=2)")
        weights[table.strip()] = int(value)
    return weights


class PrimaryEndpoint:
    """A zone's Endpoint where its primary is now: the configured one at its last
    promotion's address (capture/segments.py, `zonesync zones set-primary`). Asked
    whenever a worker (re)connects, so it follows a failover at its next pass; meta
    unreachable: the last one known."""

    def __init__(self, meta: MetaConfig, zone: str, configured):
        self.meta, self.zone, self.configured, self.known = meta, zone, configured, configured

    def __call__(self):
        from zonesync.capture.segments import at_primary

        log = logging.getLogger("zonesync.workers")
        try:
            found = at_primary(self.meta, self.zone, self.configured)
        except Exception as exc:  # noqa: BLE001 - meta down: the last known address
            log.warning("zone %s's primary: meta unreachable (%s)", self.zone, exc)
            return self.known
        if (found.host, found.port) != (self.known.host, self.known.port):
            log.warning("zone %s's primary is %s:%s", self.zone, found.host, found.port)
            self.known = found
        return self.known


def build_applier(
    zone: str,
    workers: int = 4,
    env: dict | None = None,
    table_weights: dict[str, int] | None = None,
    group: bool = False,
    atomic_transactions: bool | None = None,
):
    from zonesync.apply.batch.writer import ZoneWriter
    from zonesync.apply.loop.applier import Applier
    from zonesync.apply.loop.settings import GROUP_SESSION_S, IDLE_TRANSACTION_S, MAX_VERSION_AHEAD_S, ApplierSettings

    ep = zone_endpoint(zone, env)
    cfg = config.load(env)
    sources = [z.name for z in cfg.zones if z.name != zone]
    meta = MetaConfig.from_env(env)
    primary = PrimaryEndpoint(meta, zone, ep)

    def writer() -> ZoneWriter:
        at = primary()
        return ZoneWriter(at.host, at.port, at.user, at.password, at.database)

    return Applier(
        zone=zone,
        sources=sources,
        writer_factory=writer,
        meta=meta,
        partitions=transport.partitions(env),
        settings=ApplierSettings(
            workers=workers,
            table_weights=table_weights
            if table_weights is not None
            else parse_table_weights(
                (env if env is not None else os.environ).get("ZONESYNC_APPLY_TABLE_WEIGHTS"),
                "ZONESYNC_APPLY_TABLE_WEIGHTS",
            ),
            group=group,
            lag_warning_s=_seconds(env, "ZONESYNC_LAG_WARNING_S", 60.0),
            group_session_s=_seconds(env, "ZONESYNC_APPLY_GROUP_SESSION_S", GROUP_SESSION_S),
            idle_transaction_s=_seconds(env, "ZONESYNC_APPLY_IDLE_TRANSACTION_S", IDLE_TRANSACTION_S),
            max_version_ahead_s=_seconds(env, "ZONESYNC_APPLY_MAX_VERSION_AHEAD_S", MAX_VERSION_AHEAD_S),
            atomic_transactions=atomic_transactions
            if atomic_transactions is not None
            else _flag(env, "ZONESYNC_APPLY_ATOMIC_TRANSACTIONS"),
            behind_timeout=_seconds(env, "ZONESYNC_APPLY_BEHIND_TIMEOUT_S", 10.0),
            check_owners=_flag(env, "ZONESYNC_APPLY_CHECK_OWNERS", True),
        ),
    )


def build_tagger(zone: str, env: dict | None = None):
    """The tagger of `zone` (tagging/tagger.py): every zone's topic into its tag store, with
    the zone's applier account (its bookkeeping schema)."""
    from zonesync.tagging.tag_store import load_connection
    from zonesync.tagging.tagger import Tagger

    ep = zone_endpoint(zone, env)
    cfg = config.load(env)
    meta = MetaConfig.from_env(env)
    primary = PrimaryEndpoint(meta, zone, ep)

    def connect():
        at = primary()
        return load_connection(at.host, at.port, at.user, at.password, at.database)

    return Tagger(zone, [z.name for z in cfg.zones], connect, ep.database, meta, transport.partitions(env))


def build_kv_tagger(zone: str, env: dict | None = None):
    """The KV tagger of `zone` (tagging/kv_tagger.py): its KV repos' change logs into its tag
    store, with the zone's applier account."""
    from zonesync.runtime.kv_endpoint import kv_endpoint
    from zonesync.tagging.kv_tagger import KvTagger

    meta = MetaConfig.from_env(env)
    primary = PrimaryEndpoint(meta, zone, zone_endpoint(zone, env))
    return KvTagger(zone, kv_endpoint(zone, env), lambda *a, **kw: primary().connect(*a, **kw), meta)


def run_forever(worker) -> int:
    """Run a worker in the foreground; SIGTERM/SIGINT stop it cleanly."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Workers allocate a few short-lived objects per event: collecting generation 0 every
    # 700 allocations (the default) shows up as pauses in the lag tail. Collect less often,
    # and never scan what was loaded at start.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    worker.run()
    return 0
