"""MariaDB GTID states, and finding a checkpoint's position on another server by them.

A zone's replica writes every transaction it replicates into its own binlog
(log_slave_updates) under the transaction's GTID, `domain-server-seq`, but at its own
files and positions. A checkpoint records the GTID state at its position (per domain,
the last transaction read: its server and sequence number), so on the replica the same
point is just after those transactions (seed S001-10: the checkpoint maps to the
replica's positions).

How the position is found (`locate`):
1. The replica must hold each of those transactions: its @@gtid_binlog_state (the last
   sequence number per domain and server) is at or past it for that server. Otherwise
   they are lost with the old primary (LostTransactions), though capture may already
   have sent them to the zones. Sequence numbers alone would not do: a promoted replica
   that wrote before the mapping numbers its own transactions on from where it stopped
   receiving, under its own server id.
2. Each binlog file starts with a Gtid_list event: the binlog state before its first
   transaction. The newest file whose list is not past any of the checkpoint's
   transactions holds the point; when even the oldest file's list is past one, the
   replica purged what capture needs (BinlogGone: seed 001's secondary that did not keep
   the log).
3. From there, within each domain, every transaction up to and including the
   checkpoint's is covered; the first transaction after it (or of a domain the checkpoint
   never saw) is where capture resumes; none: at the binlog's end. Within a domain a
   replica applies in the primary's order, so nothing before that point is uncovered.
   With several domains a transaction after it may be covered: read again, its rows
   apply as no-ops (version-guarded).
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


def covers_all(state: State, other: State) -> bool:
    """Is every domain's last transaction in `other` at or before `state`'s (same server,
    no later sequence number)? For states of one history, as a checkpoint and its server."""
    return all(d in state and state[d][0] == s and n <= state[d][1] for d, (s, n) in other.items())


def state_at(conn, log_file: str, log_pos: int) -> State | None:
    """The GTID state at a binlog position of this server (None: not an event boundary)."""
    with conn.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (log_file, int(log_pos)))
        row = cur.fetchone()
    return None if row is None or row[0] is None else parse(row[0])


def binlog_state(conn) -> dict[tuple[int, int], int]:
    """(domain, server) -> the last sequence number of that server's transactions in the
    server's binlog (@@gtid_binlog_state)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_state")
        text = cur.fetchone()[0] or ""
    return _pairs(text)


def _pairs(text: str) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for m in GTID.finditer(text or ""):
        key = (int(m[1]), int(m[2]))
        out[key] = max(out.get(key, 0), int(m[3]))
    return out


def missing(held: dict[tuple[int, int], int], wanted: State) -> dict[int, tuple[int, int]]:
    """Domains whose checkpoint transaction the server's binlog lacks: domain -> (the last
    sequence number it holds of that transaction's server, the checkpoint's)."""
    return {d: (held.get((d, s), 0), n) for d, (s, n) in wanted.items() if held.get((d, s), 0) < n}


def clipped(held: dict[tuple[int, int], int], wanted: State) -> State:
    """`wanted` cut back to the transactions the server holds (after LostTransactions:
    where its copy of the old primary's history ends)."""
    out = {}
    for d, (s, n) in wanted.items():
        have = min(n, held.get((d, s), 0))
        if have:
            out[d] = (s, have)
    return out


def _events(conn, log_file: str, start: int = 4, page: int = PAGE):
    """SHOW BINLOG EVENTS of one file, a page at a time: (pos, type, end_pos, info)."""
    pos = start
    while True:
        with conn.cursor() as cur:
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(pos)} LIMIT {int(page)}", (log_file,))
            rows = cur.fetchall()
        for r in rows:
            yield int(r[1]), r[2], int(r[4]), r[5] or ""
        if len(rows) < page:
            return
        pos = int(rows[-1][4])


def _file_start(conn, log_file: str) -> dict[tuple[int, int], int]:
    """The binlog state before the file's first transaction (its Gtid_list event)."""
    head = next((info for _p, kind, _e, info in _events(conn, log_file, page=4) if kind == "Gtid_list"), "")
    return _pairs(head)


def locate(conn, state: State, where: str = "the new primary") -> tuple[str, int]:
    """The (file, position) on this server where capture resumes after `state`."""
    gone = missing(binlog_state(conn), state)
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
    start_file, passed = None, set()
    for f in reversed(files):
        head = _file_start(conn, f)
        if all(head.get((d, s), 0) <= n for d, (s, n) in state.items()):
            start_file = f
            passed = {d for d, (s, n) in state.items() if head.get((d, s), 0) == n}
            break
    if start_file is None:
        raise BinlogGone(
            f"{where} no longer holds the binlog after the checkpoint (its oldest file {files[0]} starts past "
            f"{render(state) or 'the beginning'}): it purged what capture needs; the zone needs repair copies"
        )
    for f in files[files.index(start_file) :]:
        for pos, kind, _end, info in _events(conn, f):
            m = GTID.search(info) if kind == "Gtid" else None
            if m is None:
                continue
            d, s, n = int(m[1]), int(m[2]), int(m[3])
            if d not in state or d in passed:
                return f, pos  # the first transaction capture has not read
            if state[d] == (s, n):
                passed.add(d)  # the checkpoint's own transaction: read, and the last one read
    return str(end[0]), int(end[1])
