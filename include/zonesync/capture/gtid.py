"""MariaDB GTID states, and finding a checkpoint's position on another server by them.

A zone's replica writes every transaction it replicates into its own binlog
(log_slave_updates) under the transaction's GTID, `domain-server-seq`, but at its own
files and positions. A checkpoint records the GTID state at its position (the last
sequence number read per domain), so on the replica the same point is the first
transaction that state does not cover (seed S001-10: the checkpoint maps to the
replica's positions).

How the position is found (`locate`):
1. The replica must hold every transaction the state covers: its @@gtid_binlog_pos is at
   or past the state in every domain; else those transactions are lost with the old
   primary (LostTransactions), though capture may already have sent them to the zones.
2. Each binlog file starts with a Gtid_list event: the state before its first
   transaction. The newest file whose list the checkpoint's state covers holds the point;
   when even the oldest file's list is past the state, the replica purged what capture
   needs (BinlogGone: seed 001's secondary that did not keep the log).
3. From there, the first GTID event the state does not cover is where capture resumes;
   none: at the binlog's end. Within a domain a replica applies in the primary's order,
   so nothing before that point is uncovered. With several domains a transaction after
   it may be covered: read again, its rows apply as no-ops (version-guarded).
"""

from __future__ import annotations

import re

from zonesync.events import file_number

GTID = re.compile(r"(\d+)-(\d+)-(\d+)")
PAGE = 5000  # events per SHOW BINLOG EVENTS page


class GtidError(RuntimeError):
    """The checkpoint cannot be placed on this server: the message says why and what to do."""


class LostTransactions(GtidError):
    def __init__(self, missing: dict[int, tuple[int, int]], message: str):
        super().__init__(message)
        self.missing = missing  # domain -> (server's last seq, checkpoint's seq)


class BinlogGone(GtidError):
    pass


State = dict[int, tuple[int, int]]  # domain -> (server id, seq) of the last transaction read


def parse(text: str | None) -> State:
    """'1-11-5,2-12-3' -> {1: (11, 5), 2: (12, 3)}; '' or None -> {}."""
    state: State = {}
    for part in filter(None, (p.strip() for p in (text or "").strip("[]").split(","))):
        m = GTID.fullmatch(part)
        if m is None:
            raise GtidError(f"GTID position {text!r}: {part!r} is not DOMAIN-SERVER-SEQ")
        state[int(m[1])] = (int(m[2]), int(m[3]))
    return state


def render(state: State) -> str:
    return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(state.items()))


def covers(state: State, domain: int, seq: int) -> bool:
    """Was the transaction domain-?-seq read before the point `state` describes?"""
    return domain in state and seq <= state[domain][1]


def covers_all(state: State, other: State) -> bool:
    return all(covers(state, d, n) for d, (_s, n) in other.items())


def server_state(conn) -> State:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        return parse(cur.fetchone()[0])


def state_at(conn, log_file: str, log_pos: int) -> State | None:
    """The GTID state at a binlog position of this server (None: not an event boundary)."""
    with conn.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (log_file, int(log_pos)))
        row = cur.fetchone()
    return None if row is None or row[0] is None else parse(row[0])


def missing(server: State, wanted: State) -> dict[int, tuple[int, int]]:
    """Domains where the server's binlog stops before `wanted`: domain -> (server's, wanted)."""
    return {d: (server.get(d, (0, 0))[1], n) for d, (_s, n) in wanted.items() if server.get(d, (0, 0))[1] < n}


def _events(conn, log_file: str, start: int = 4):
    """SHOW BINLOG EVENTS of one file, a page at a time: (pos, type, end_pos, info)."""
    pos = start
    while True:
        with conn.cursor() as cur:
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(pos)} LIMIT {PAGE}", (log_file,))
            rows = cur.fetchall()
        for r in rows:
            yield int(r[1]), r[2], int(r[4]), r[5] or ""
        if len(rows) < PAGE:
            return
        pos = int(rows[-1][4])


def locate(conn, state: State, where: str = "the new primary") -> tuple[str, int]:
    """The (file, position) on this server where capture resumes after `state`."""
    have = server_state(conn)
    gone = missing(have, state)
    if gone:
        lost = ", ".join(f"domain {d}: it has up to seq {h}, capture read up to {n}" for d, (h, n) in gone.items())
        raise LostTransactions(
            gone,
            f"{where} lacks transactions capture already read on the old primary ({lost}): wait until it has "
            "applied them (its relay log), or promote with --allow-lost and check the zone afterwards",
        )
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = sorted((r[0] for r in cur.fetchall()), key=file_number)
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()
    if not files or end is None:
        raise GtidError(f"binary logging is off on {where}: it cannot be a zone primary (set log_bin)")
    start_file = None
    for f in reversed(files):
        head = next((info for _p, kind, _e, info in _events(conn, f) if kind == "Gtid_list"), "[]")
        if covers_all(state, parse(head)):
            start_file = f
            break
    if start_file is None:
        raise BinlogGone(
            f"{where} no longer holds the binlog after the checkpoint (its oldest file {files[0]} starts past "
            f"{render(state) or 'the beginning'}): it purged what capture needs; the zone needs repair copies"
        )
    for f in files[files.index(start_file) :]:
        for pos, kind, _end, info in _events(conn, f):
            if kind != "Gtid":
                continue
            m = GTID.search(info)
            if m and not covers(state, int(m[1]), int(m[3])):
                return f, pos
    return str(end[0]), int(end[1])
