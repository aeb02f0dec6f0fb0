"""What every `zonesync` command module shares: one-line errors, the meta store and the
zones of this process's settings, and output helpers. Command modules import this one and
the domain core, never each other.

Addresses come from the environment (runtime.endpoints.zone_endpoint, MetaConfig.from_env):
a missing one is a ConfigError line unless the dev environment is selected.
"""

from __future__ import annotations

import sys


def fail(message: str, prefix: str = "zonesync") -> int:
    """A user-fixable error: one line on stderr naming what is wrong and the fix; exit code 2."""
    print(f"{prefix}: {message}", file=sys.stderr)
    return 2


def meta():
    """The meta store (ZONESYNC_META_URL)."""
    from zonesync.meta.db import MetaConfig

    return MetaConfig.from_env()


def zone_endpoint(zone: str):
    """Zone `zone`'s database (ZONESYNC_ZONE_<NAME>_URL) as a runtime Endpoint."""
    from zonesync.runtime.endpoints import zone_endpoint as resolve

    return resolve(zone)


def zone_conn(zone: str):
    """A new connection to a zone's database: UTC, not autocommit, the Endpoint's timeouts."""
    return zone_endpoint(zone).connect(autocommit=False, init_command="SET time_zone = '+00:00'")


def zone_writer(zone: str):
    """The applier's writer on a zone's database (locks add / resolve)."""
    from zonesync.apply.batch.writer import ZoneWriter

    ep = zone_endpoint(zone)
    return ZoneWriter(ep.host, ep.port, ep.user, ep.password, ep.database)


def zone_names() -> list[str]:
    """The zones of this process's settings (ZONESYNC_ZONES), in id order."""
    from zonesync import config

    return [z.name for z in config.load().zones]


def numbers(values) -> str:
    """1, 2, 3: partitions and ids in messages."""
    return ", ".join(map(str, values))
