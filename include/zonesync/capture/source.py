"""The zone database a replicator captures: how to reach it, and what it says about itself."""

from __future__ import annotations

from dataclasses import dataclass, field

import pymysql

from zonesync.capture.binlog import binlog_end


class SourceError(RuntimeError):
    pass


@dataclass
class SourceDB:
    host: str
    port: int
    user: str
    password: str
    schemas: list[str] = field(default_factory=lambda: ["zonesync_app"])
    _pks: dict[tuple[str, str], list[str]] = field(default_factory=dict, repr=False, compare=False)

    def settings(self) -> dict:
        return {"host": self.host, "port": self.port, "user": self.user, "passwd": self.password}

    def connect(self):
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password)

    def master_status(self) -> tuple[str, int]:
        conn = self.connect()
        try:
            end = binlog_end(conn)
        finally:
            conn.close()
        if end is None:
            raise SourceError(f"binary logging is off on {self.host}:{self.port}: zones need log_bin")
        return end

    def binlog_files(self) -> set[str]:
        """The binlog files the server still holds (SHOW BINARY LOGS)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                return {row[0] for row in cur.fetchall()}
        finally:
            conn.close()

    def primary_key(self, schema: str, table: str) -> list[str]:
        """A table's key columns, asked once per table for the life of the process (a key
        change is a DDL, and DDL on replicated tables is not supported while capturing)."""
        key = (schema, table)
        if key not in self._pks:
            conn = self.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                        (schema, table),
                    )
                    self._pks[key] = [r[0] for r in cur.fetchall()]
            finally:
                conn.close()
        if not self._pks[key]:
            raise SourceError(f"table {schema}.{table} has no primary key: it cannot be replicated")
        return self._pks[key]
