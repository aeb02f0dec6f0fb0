"""Where a zone's binlog ends: the one place that asks the server."""

from __future__ import annotations

import pymysql


class Position(tuple):
    """(file, position) in one server's binlog, knowing which server (`server_id`): a
    position means nothing on another one (a zone's promoted replica: docs/failover.md).
    Compares, unpacks and serializes as the plain pair (JSON drops the server)."""

    server_id: int | None

    def __new__(cls, log_file: str, log_pos: int, server_id: int | None = None):
        self = super().__new__(cls, (log_file, int(log_pos)))
        self.server_id = server_id
        return self


def binlog_end(conn) -> Position | None:
    """(file, position) the server will write next, or None when binary logging is off.

    MySQL 8.4 removed SHOW MASTER STATUS for SHOW BINARY LOG STATUS; MariaDB knows only
    the first. If neither works (the user lacks BINLOG MONITOR / REPLICATION CLIENT),
    the server's error is raised.
    """
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW MASTER STATUS")
        except pymysql.err.MySQLError:
            cur.execute("SHOW BINARY LOG STATUS")
        row = cur.fetchone()
        if not row:
            return None
        cur.execute("SELECT @@GLOBAL.server_id")
        server_id = int(cur.fetchone()[0])
    return Position(row[0], int(row[1]), server_id)


def registered_reader(conn, server_id: int) -> str | None:
    """The name a binlog reader registered under with `server_id` (SHOW SLAVE HOSTS: native
    replicas always register, zonesync replicators register under their lease holder name),
    or None. Readers that never register cannot be seen here. None too when the user may
    not list them (REPLICATION MASTER ADMIN): the check is then skipped, not failed."""
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW SLAVE HOSTS")
        except pymysql.err.MySQLError:
            return None
        for row in cur.fetchall():
            if int(row[0]) == server_id:
                return str(row[1] or "") or f"an unnamed reader (port {row[2]})"
    return None
