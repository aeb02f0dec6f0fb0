"""One type for "a zone's MySQL": every layer (guard, capture, apply, switch, CLI, Airflow
hooks, Spark job arguments) connects through `Endpoint.connect()` and asks for primary
keys through `primary_key()`, so timeouts, autocommit and the key query live in one place.

A password never shows in a repr or a log line (field repr=False); `url()` leaves it out.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field

import pymysql

from zonesync import config

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30  # a half-open connection after a failover must not hang a caller forever

_PRIMARY_KEY_SQL = (
    "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = {schema} "
    "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION"
)


class EndpointError(ValueError):
    """A zone URL that cannot be used: the message names the setting and the fix."""


@dataclass(frozen=True)
class Endpoint:
    """Where one zone's database is, and who zonesync is there."""

    name: str
    host: str
    port: int
    user: str
    password: str = field(default="", repr=False)
    database: str = "zonesync_app"
    zone_id: int | None = None

    def connect(
        self,
        database: str | None = None,
        *,
        autocommit: bool = True,
        timeout: float = CONNECT_TIMEOUT_S,
        read_timeout: float | None = READ_TIMEOUT_S,
        **kwargs,
    ) -> pymysql.connections.Connection:
        """A new DB-API connection; `database` None means the endpoint's own, "" none."""
        db = self.database if database is None else database
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=db or None,
            autocommit=autocommit,
            connect_timeout=timeout,
            read_timeout=read_timeout,
            write_timeout=read_timeout,
            **kwargs,
        )

    def url(self) -> str:
        """mysql://user@host:port/db, without the password (for logs and messages)."""
        return f"mysql://{urllib.parse.quote(self.user)}@{self.host}:{self.port}/{self.database}"

    def jdbc_url(self) -> str:
        # jdbc:mysql:// with the MariaDB Connector/J jar: jdbc:mariadb:// makes Spark pick
        # a dialect whose partitioned reads break.
        return f"jdbc:mysql://{self.host}:{self.port}/{self.database}"

    @classmethod
    def from_url(cls, name: str, url: str, zone_id: int | None = None, setting: str = "the zone URL") -> Endpoint:
        """`mysql://user:password@host:port/db` (user and password percent-encoded)."""
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("mysql", "mariadb") or not parsed.hostname:
            raise EndpointError(
                f"{setting} must look like mysql://user:password@host:port/db, got {parsed.scheme}://..."
            )
        if not parsed.username:  # never a silent root: each role has its own account (docs/security.md)
            raise EndpointError(f"{setting} names no user: write mysql://user:password@host:port/db with the "
                                "account of this role")  # fmt: skip
        return cls(
            name=name,
            host=parsed.hostname,
            port=parsed.port or 3306,
            user=urllib.parse.unquote(parsed.username),
            password=urllib.parse.unquote(parsed.password or ""),
            database=parsed.path.lstrip("/") or "zonesync_app",
            zone_id=zone_id,
        )


def zone_endpoint(name: str, env: dict | None = None) -> Endpoint:
    """Zone `name`'s database: ZONESYNC_ZONE_<NAME>_URL, else, only with the dev environment
    selected (config.dev_selected), its local instance; its id is its place in ZONESYNC_ZONES.
    A bad or missing setting is a ConfigError naming the variable."""
    env = os.environ if env is None else env
    zone = config.load(env).zone(name)
    variable = f"ZONESYNC_ZONE_{name.upper()}_URL"
    url = env.get(variable)
    if not url:
        config.require_dev(variable, f"zone {name}'s database", env)
        return Endpoint(name, "127.0.0.1", zone.port, "root", "", "zonesync_app", zone_id=zone.id)
    try:
        return Endpoint.from_url(name, url, zone.id, setting=variable)
    except EndpointError as exc:
        raise config.ConfigError(str(exc)) from None


def primary_key(conn, table: str, schema: str | None = None) -> list[str]:
    """The table's primary-key columns in key order ([] when it has none), in `schema` or
    the connection's current database."""
    with conn.cursor() as cur:
        if schema is None:
            cur.execute(_PRIMARY_KEY_SQL.format(schema="DATABASE()"), (table,))
        else:
            cur.execute(_PRIMARY_KEY_SQL.format(schema="%s"), (schema, table))
        return [r[0] for r in cur.fetchall()]
