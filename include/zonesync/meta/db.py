"""Connecting to the meta store and keeping its schema current.

Where the meta store is comes from ZONESYNC_META_URL
(`mysql://user:password@host:port/database`), or, only with the local environment
selected (config.dev_selected), from the dev settings (127.0.0.1:<base port>, database
zonesync_meta). The password
is read from the URL or ZONESYNC_META_PASSWORD, never written anywhere.

Schema migrations are the numbered files in include/sql/meta/. Each is made of
idempotent statements and is recorded in schema_migrations only after it fully
ran, so a migration interrupted by a crash runs again, harmlessly, next time.
"""

from __future__ import annotations

import os
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from zonesync import config
from zonesync.runtime.endpoints import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
from zonesync.sql_names import is_ident

MIGRATIONS = config.REPO_ROOT / "include" / "sql" / "meta"


class MetaError(RuntimeError):
    """A meta-store problem the user can act on."""


# What an unreachable (or briefly unusable) meta store raises: a refused connection, a
# connection lost mid-statement, a deadlock or lock wait given up. Workers that can go on
# without meta for a while (capture, apply) retry these later instead of restarting.
META_DOWN = (MetaError, pymysql.err.OperationalError, pymysql.err.InterfaceError)


@dataclass(frozen=True)
class MetaConfig:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str

    @classmethod
    def from_env(cls, env: dict | None = None) -> MetaConfig:
        env = dict(os.environ if env is None else env)
        url = env.get("ZONESYNC_META_URL")
        if not url:
            config.require_dev("ZONESYNC_META_URL", "the meta store", env)
            cfg = config.load(env)
            return cls("127.0.0.1", cfg.meta_port, "root", env.get("ZONESYNC_META_PASSWORD", ""), "zonesync_meta")
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("mysql", "mariadb") or not parsed.hostname:
            raise config.ConfigError("ZONESYNC_META_URL must look like mysql://user:password@host:port/database")
        database = parsed.path.lstrip("/") or "zonesync_meta"
        if not is_ident(database):
            raise config.ConfigError(f"ZONESYNC_META_URL: database name {database!r} is invalid")
        if not parsed.username:  # never a silent root (docs/security.md)
            raise config.ConfigError("ZONESYNC_META_URL names no user: write mysql://user:password@host:port/db "
                                     "with the meta store account of this role")  # fmt: skip
        return cls(
            host=parsed.hostname,
            port=parsed.port or 3306,
            user=urllib.parse.unquote(parsed.username),
            password=urllib.parse.unquote(parsed.password or env.get("ZONESYNC_META_PASSWORD", "")),
            database=database,
        )

    def connect(
        self, autocommit: bool = True, timeout: float = CONNECT_TIMEOUT_S, database: str | None = None
    ) -> pymysql.connections.Connection:
        """A new connection to the meta database (`database=""`: to the server only), with a
        zone connection's timeouts (runtime/endpoints.py), scaled when `timeout` is given."""
        io_timeout = timeout * READ_TIMEOUT_S / CONNECT_TIMEOUT_S
        try:
            return pymysql.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                database=(self.database if database is None else database) or None,
                autocommit=autocommit,
                connect_timeout=timeout,
                read_timeout=io_timeout,
                write_timeout=io_timeout,
                init_command="SET time_zone = '+00:00'",
            )
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code == 1049:
                raise MetaError(
                    f"meta database {self.database} does not exist on {self.host}:{self.port}: "
                    "run `zonesync meta migrate`"
                ) from None
            raise MetaError(f"meta store {self.host}:{self.port} unreachable: {exc.args[-1]}") from None

    def run(self, sql: str, args=None) -> tuple[list[tuple], int]:
        """One statement on a short-lived autocommit connection: (rows, lastrowid)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall()), int(cur.lastrowid or 0)
        finally:
            conn.close()

    @contextmanager
    def transaction(self):
        """A cursor in one transaction on a short-lived connection: committed when the
        block ends, rolled back on any error."""
        conn = self.connect(autocommit=False)
        try:
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    def describe(self) -> str:
        return f"{self.user}@{self.host}:{self.port}/{self.database}"


def _statements(sql: str) -> list[str]:
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def migration_files() -> list[tuple[int, Path]]:
    out = []
    for path in sorted(MIGRATIONS.glob("*.sql")):
        number = int(path.name.split("_", 1)[0])
        out.append((number, path))
    return out


def migrate(meta: MetaConfig) -> list[int]:
    """Create the database if needed and apply every migration not yet recorded."""
    server = meta.connect(database="")
    try:
        with server.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{meta.database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    finally:
        server.close()
    conn = meta.connect()
    applied: list[int] = []
    try:
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INT NOT NULL PRIMARY KEY, "
                "name VARCHAR(128) NOT NULL, applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
            )
            cur.execute("SELECT version FROM schema_migrations")
            done = {row[0] for row in cur.fetchall()}
            for number, path in migration_files():
                if number in done:
                    continue
                for stmt in _statements(path.read_text()):
                    cur.execute(stmt)
                cur.execute("INSERT IGNORE INTO schema_migrations (version, name) VALUES (%s, %s)", (number, path.name))
                applied.append(number)
    finally:
        conn.close()
    return applied
