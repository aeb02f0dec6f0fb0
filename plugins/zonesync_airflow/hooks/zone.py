"""ZoneHook: a zone's database as an Airflow connection.

Each zone is one Airflow connection, `zonesync_zone_<name>` by convention, of
type mysql; its extra holds `zone_id` and `zone_name`. The hook turns it into the
domain core's `Endpoint` (zonesync.runtime.endpoints), the one type every layer
connects through, with its connect and read timeouts. Credentials stay in the
connection: the JDBC settings this hook hands to Spark carry the user, and the
password travels only as an environment variable of the spark-submit process.
"""

from __future__ import annotations

from airflow.sdk import BaseHook

from zonesync.runtime.endpoints import Endpoint

ZONE_CONN_PREFIX = "zonesync_zone_"


def endpoint_of(conn, conn_id: str) -> Endpoint:
    """The zone endpoint an Airflow connection describes (its extra must name the zone_id)."""
    extra = conn.extra_dejson
    if "zone_id" not in extra:
        raise ValueError(f'connection {conn_id}: extra field zone_id is missing: add {{"zone_id": N}} to its extra')
    if not conn.login:  # never a silent root (docs/security.md)
        raise ValueError(f"connection {conn_id}: login is empty: set the zone account this role uses")
    return Endpoint(
        name=extra.get("zone_name") or conn_id.removeprefix(ZONE_CONN_PREFIX),
        host=conn.host or "127.0.0.1",
        port=int(conn.port or 3306),
        user=conn.login,
        password=conn.password or "",
        database=conn.schema or "zonesync_app",
        zone_id=int(extra["zone_id"]),
    )


class ZoneHook(BaseHook):
    conn_name_attr = "zone_conn_id"
    default_conn_name = "zonesync_zone_a"
    conn_type = "mysql"
    hook_name = "zonesync zone"

    def __init__(self, zone_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.zone_conn_id = zone_conn_id

    @classmethod
    def for_zone(cls, zone: str, prefix: str = ZONE_CONN_PREFIX) -> ZoneHook:
        return cls(zone_conn_id=f"{prefix}{zone}")

    def endpoint(self) -> Endpoint:
        return endpoint_of(self.get_connection(self.zone_conn_id), self.zone_conn_id)

    async def aendpoint(self) -> Endpoint:
        """For triggers: the triggerer resolves connections asynchronously."""
        return endpoint_of(await self.aget_connection(self.zone_conn_id), self.zone_conn_id)

    def get_conn(self):
        """A new autocommit DB-API connection to the zone's app database (with timeouts)."""
        return self.endpoint().connect()
