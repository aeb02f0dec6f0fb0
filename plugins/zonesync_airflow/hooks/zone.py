"""ZoneHook: a zone's database as an Airflow connection.

Each zone is one Airflow connection, `zonesync_zone_<name>` by convention, of
type mysql; its extra holds `zone_id` and `zone_name`. Credentials stay in the
connection: the JDBC settings this hook hands to Spark carry the user, and the
password travels only as an environment variable of the spark-submit process.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow.sdk import BaseHook

ZONE_CONN_PREFIX = "zonesync_zone_"


@dataclass(frozen=True)
class ZoneEndpoint:
    name: str
    zone_id: int
    host: str
    port: int
    database: str
    user: str
    password: str

    def connect(self):
        """A new autocommit DB-API connection to the zone's app database."""
        import pymysql

        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=self.database,
            autocommit=True,
            connect_timeout=5,
            read_timeout=30,  # a half-open connection after a failover must not hang a sensor's poll
            write_timeout=30,
        )

    def jdbc_url(self) -> str:
        # jdbc:mysql:// with the MariaDB Connector/J jar: jdbc:mariadb:// makes Spark
        # pick a dialect whose partitioned reads break.
        return f"jdbc:mysql://{self.host}:{self.port}/{self.database}"


class ZoneHook(BaseHook):
    conn_name_attr = "zone_conn_id"
    default_conn_name = "zonesync_zone_a"
    conn_type = "mysql"
    hook_name = "zonesync zone"

    def __init__(self, zone_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.zone_conn_id = zone_conn_id

    @classmethod
    def for_zone(cls, zone: str) -> ZoneHook:
        return cls(zone_conn_id=f"{ZONE_CONN_PREFIX}{zone}")

    def endpoint(self) -> ZoneEndpoint:
        conn = self.get_connection(self.zone_conn_id)
        extra = conn.extra_dejson
        name = extra.get("zone_name") or self.zone_conn_id.removeprefix(ZONE_CONN_PREFIX)
        if "zone_id" not in extra:
            raise ValueError(
                f'connection {self.zone_conn_id}: extra field zone_id is missing: add {{"zone_id": N}} to its extra'
            )
        return ZoneEndpoint(
            name=name,
            zone_id=int(extra["zone_id"]),
            host=conn.host or "127.0.0.1",
            port=int(conn.port or 3306),
            database=conn.schema or "zonesync_app",
            user=conn.login or "root",
            password=conn.password or "",
        )

    def get_conn(self):
        return self.endpoint().connect()
