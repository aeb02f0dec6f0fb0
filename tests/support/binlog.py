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


def boundaries(conn, log_file: str) -> set[int]:
    """The positions of a binlog file that are not inside a transaction: the end of an Xid
    (or COMMIT) closing a BEGIN group, of a DDL's group, and of any event outside a group."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{log_file}'")
        events = cur.fetchall()
    out, in_txn, ddl = {4}, False, False
    for _log, _pos, kind, _server, end, info in events:
        if kind == "Gtid":
            in_txn, ddl = True, not info.startswith("BEGIN")
        elif in_txn and (kind == "Xid" or (kind == "Query" and (ddl or info.strip().upper() == "COMMIT"))):
            in_txn = False
            out.add(int(end))
        elif not in_txn:
            out.add(int(end))
    return out


def assert_at_boundaries(conn, checkpoints, span: tuple[str, int, int]) -> None:
    """Every checkpoint lies at a transaction boundary of its binlog file, and none inside
    `span` (file, position of a transaction's GTID event, end of its Xid)."""
    files = {f: boundaries(conn, f) for f in {cp.log_file for cp in checkpoints}}
    inside = [(cp.log_file, cp.log_pos) for cp in checkpoints if cp.log_pos not in files[cp.log_file]]
    assert not inside, f"checkpoints inside a transaction: {inside}"
    log_file, start, end = span
    assert not [cp for cp in checkpoints if cp.log_file == log_file and start < cp.log_pos < end], (
        "a checkpoint inside the large transaction"
    )


def transaction_span(conn, log_file: str, start: int) -> tuple[str, int, int]:
    """(file, position of the GTID event of the transaction that begins at `start`, end of
    its Xid)."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{log_file}' FROM {start}")
        events = cur.fetchall()
    assert events[0][2] == "Gtid" and events[0][5].startswith("BEGIN"), events[0]
    xid = next(e for e in events if e[2] == "Xid")
    return log_file, int(events[0][1]), int(xid[4])
