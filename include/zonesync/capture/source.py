"""The zone database a replicator captures: how to reach it, and what it says about itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from zonesync.capture.binlog import binlog_end
from zonesync.config import ConfigError
from zonesync.runtime.endpoints import Endpoint, primary_key


class SourceError(RuntimeError):
    pass


class SourceSettings(ConfigError):
    """The zone's server is not set up for capture: the replicator refuses it."""


@dataclass
class SourceDB:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    schemas: list[str] = field(default_factory=lambda: ["zonesync_app"])
    _pks: dict[tuple[str, str], list[str]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, endpoint: Endpoint) -> SourceDB:
        """The zone database at `endpoint`, capturing its own schema."""
        return cls(endpoint.host, endpoint.port, endpoint.user, endpoint.password, [endpoint.database])

    def settings(self) -> dict:
        """Connection settings of the binlog stream (binlog_stream.py opens that one itself)."""
        return {"host": self.host, "port": self.port, "user": self.user, "passwd": self.password}

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint("source", self.host, self.port, self.user, self.password)

    def connect(self):
        """A short-lived connection for the questions below (no database selected)."""
        return self.endpoint.connect(database="")

    def master_status(self) -> tuple[str, int]:
        conn = self.connect()
        try:
            end = binlog_end(conn)
        finally:
            conn.close()
        if end is None:
            raise SourceError(f"binary logging is off on {self.host}:{self.port}: zones need log_bin")
        return end

    def check_capture_settings(self) -> list[str]:
        """What capture needs from the server (seed S003-28): ROW events with FULL images and
        FULL metadata, or the events would not carry whole rows and column names. A zone
        without them is refused (SourceSettings). What durability needs (S002-04:
        sync_binlog=1, innodb_flush_log_at_trx_commit=1, or a commit acknowledged to a
        client can be lost with the machine before it is in the binlog) is returned as
        warnings: development zones trade it for speed."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image, "
                    "@@GLOBAL.binlog_row_metadata, @@GLOBAL.sync_binlog, @@GLOBAL.innodb_flush_log_at_trx_commit"
                )
                log_bin, fmt, image, metadata, sync, flush = cur.fetchone()
        finally:
            conn.close()
        wrong = [
            f"{name} is {value}, capture needs {want}"
            for name, value, want in (
                ("log_bin", log_bin, 1),
                ("binlog_format", fmt, "ROW"),
                ("binlog_row_image", image, "FULL"),
                ("binlog_row_metadata", metadata, "FULL"),
            )
            if str(value).upper() != str(want)
        ]
        if wrong:
            raise SourceSettings(f"zone database {self.host}:{self.port}: {'; '.join(wrong)}: set them and restart")
        return [
            f"{name} is {value}: a commit can be lost with the machine before it reaches the binlog (set it to 1)"
            for name, value in (("sync_binlog", sync), ("innodb_flush_log_at_trx_commit", flush))
            if int(value) != 1
        ]

    def server_id(self) -> int:
        """The server's @@server_id: which server answers at this address."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.server_id")
                return int(cur.fetchone()[0])
        finally:
            conn.close()

    def moved_to(self, host: str, port: int) -> None:
        """The zone's primary is now at host:port (segments.py): same account, new server;
        what was known of its tables is asked again."""
        self.host, self.port = host, int(port)
        self._pks.clear()

    def gtid_state_at(self, log_file: str, log_pos: int) -> dict | None:
        """The GTID state at a position of this server's binlog (gtid.py), None if unknown."""
        from zonesync.capture import gtid

        conn = self.connect()
        try:
            return gtid.state_at(conn, log_file, log_pos)
        finally:
            conn.close()

    def binlog_files(self) -> set[str]:
        """The binlog files the server still holds (SHOW BINARY LOGS)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                return {row[0] for row in cur.fetchall()}
        finally:
            conn.close()

    def forget(self, schema: str, table: str) -> None:
        """A DDL changed the table: its key is asked again when next needed."""
        self._pks.pop((schema, table), None)

    def primary_key(self, schema: str, table: str) -> list[str]:
        """A table's key columns, asked once per table until a DDL on it is read (forget):
        the key of the rows read after it is asked then."""
        key = (schema, table)
        if key not in self._pks:
            conn = self.connect()
            try:
                self._pks[key] = primary_key(conn, table, schema)
            finally:
                conn.close()
        if not self._pks[key]:
            raise SourceError(f"table {schema}.{table} has no primary key: it cannot be replicated")
        return self._pks[key]
