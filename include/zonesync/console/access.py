"""How the console's callers reach a zone, the same for the `zonesync` command (cli/common.py)
and the HTTP API (plugins/zonesync_airflow/api): the zone's Endpoint from its settings
(ZONESYNC_ZONE_<NAME>_URL, or the dev environment's)."""

from __future__ import annotations


def zone_conn(zone: str):
    """A new connection to a zone's database: UTC, not autocommit, the Endpoint's timeouts."""
    from zonesync.runtime.endpoints import zone_endpoint

    return zone_endpoint(zone).connect(autocommit=False, init_command="SET time_zone = '+00:00'")


def zone_writer(zone: str):
    """The applier's writer on a zone's database (locks add / resolve)."""
    from zonesync.apply.batch.writer import ZoneWriter
    from zonesync.runtime.endpoints import zone_endpoint

    ep = zone_endpoint(zone)
    return ZoneWriter(ep.host, ep.port, ep.user, ep.password, ep.database)
