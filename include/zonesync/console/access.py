"""How the console's callers reach a zone, the same for the `zonesync` command (cli/common.py)
and the HTTP API (plugins/zonesync_airflow/api): the zone's Endpoint from its settings
(ZONESYNC_ZONE_<NAME>_URL, or the dev environment's), at the address of its last promotion
when it has had one (`zonesync zones set-primary`, capture/segments.py)."""

from __future__ import annotations


def primary_endpoint(zone: str):
    """The zone's Endpoint: its settings' account, at its primary now. Meta unreachable:
    the settings' address (a command that needs meta says so itself)."""
    from zonesync.capture.segments import at_primary
    from zonesync.meta.db import MetaConfig
    from zonesync.runtime.endpoints import zone_endpoint

    ep = zone_endpoint(zone)
    try:
        return at_primary(MetaConfig.from_env(), zone, ep)
    except Exception:  # noqa: BLE001 - meta down or not set up
        return ep


def zone_conn(zone: str):
    """A new connection to a zone's database: UTC, not autocommit, the Endpoint's timeouts."""
    return primary_endpoint(zone).connect(autocommit=False, init_command="SET time_zone = '+00:00'")


def zone_writer(zone: str):
    """The applier's writer on a zone's database (locks add / resolve)."""
    from zonesync.apply.batch.writer import ZoneWriter

    ep = primary_endpoint(zone)
    return ZoneWriter(ep.host, ep.port, ep.user, ep.password, ep.database)
