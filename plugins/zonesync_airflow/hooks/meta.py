"""ZonesyncMetaHook: the meta store (PiMMS) as an Airflow connection.

The connection (`zonesync_meta` by default, type mysql) holds host, port, login,
password and schema; the hook turns it into the domain core's MetaConfig, so
no step ever reads credentials from anywhere but Airflow's connection store.
"""

from __future__ import annotations

from airflow.sdk import BaseHook

from zonesync.meta.db import MetaConfig
from zonesync.sql_names import is_ident


def meta_config_of(conn) -> MetaConfig:
    if conn.schema and not is_ident(conn.schema):
        raise ValueError(f"connection {conn.conn_id}: schema {conn.schema!r} is not a plain database name")
    if not conn.login:  # never a silent root (docs/security.md)
        raise ValueError(f"connection {conn.conn_id}: login is empty: set the meta store account this role uses")
    return MetaConfig(
        host=conn.host or "127.0.0.1",
        port=int(conn.port or 3306),
        user=conn.login,
        password=conn.password or "",
        database=conn.schema or "zonesync_meta",
    )


class ZonesyncMetaHook(BaseHook):
    conn_name_attr = "meta_conn_id"
    default_conn_name = "zonesync_meta"
    conn_type = "mysql"
    hook_name = "zonesync meta store"

    def __init__(self, meta_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.meta_conn_id = meta_conn_id

    def meta_config(self) -> MetaConfig:
        return meta_config_of(self.get_connection(self.meta_conn_id))

    async def ameta_config(self) -> MetaConfig:
        """For triggers: the triggerer resolves connections asynchronously."""
        return meta_config_of(await self.aget_connection(self.meta_conn_id))

    def get_conn(self):
        return self.meta_config().connect()
