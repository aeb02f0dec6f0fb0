"""Reading a test zone's binlog from a position, as the replicator does."""

from __future__ import annotations

from pymysqlreplication import BinLogStreamReader


def position(conn) -> tuple[str, int]:
    """The zone's binlog end: where the changes a test is about to make begin."""
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return file, int(pos)


def open_stream(inst, start: tuple[str, int], server_id: int, only_events, reader_class=BinLogStreamReader):
    """A non-blocking stream of the app schema from `start`, with the replicator's options."""
    return reader_class(
        connection_settings={"host": "127.0.0.1", "port": inst.port, "user": "root", "passwd": ""},
        server_id=server_id,
        only_events=only_events,
        only_schemas=["zonesync_app"],
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        freeze_schema=True,
    )
