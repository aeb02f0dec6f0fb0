"""Where a zone's binlog ends: the one place that asks the server."""

from __future__ import annotations

import pymysql


def binlog_end(conn) -> tuple[str, int] | None:
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
    return (row[0], int(row[1])) if row else None
