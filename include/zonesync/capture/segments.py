"""The servers a zone's capture has read, one segment each (meta `capture_segments`, 0021).

A segment is one server's binlog: its address and server id, where capture began on it,
and how its positions become LSNs. LSNs are `file_number << 47 | position << 15 | row`
(events.py); on a segment the file number is the server's plus `lsn_file_offset`, chosen
when the segment begins (failover.py) so that its LSNs are all above `lsn_floor`, itself
above every LSN published before. Re-reading the same server's binlog still gives the
same LSNs; a position only means something on the segment's own server, so checkpoints
carry their segment, and positions are compared only within one.

Segment 0 is the server capture first read. Its row is written by the first replicator
pass that finds none (`first`), with the server's id, so that a different server found
later at the same address (a virtual IP moved, a host rebuilt) is noticed instead of
being read at positions that mean nothing there (replicator.py, step 1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from zonesync.meta.db import MetaConfig
from zonesync.runtime.endpoints import Endpoint

COLUMNS = "segment, host, port, server_id, first_file, first_pos, gtid_pos, lsn_file_offset, lsn_floor, lost_gtids"


@dataclass(frozen=True)
class Segment:
    zone: str
    segment: int
    host: str
    port: int
    server_id: int
    first_file: str
    first_pos: int
    gtid_pos: str | None = None
    lsn_file_offset: int = 0
    lsn_floor: int = 0
    lost_gtids: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _segment(zone: str, r) -> Segment:
    return Segment(zone, int(r[0]), r[1], int(r[2]), int(r[3]), r[4], int(r[5]), r[6], int(r[7]), int(r[8]), r[9])


def current(meta: MetaConfig, zone: str, cur=None) -> Segment | None:
    """The zone's newest segment (its primary now), or None before capture first ran."""
    sql = f"SELECT {COLUMNS} FROM capture_segments WHERE zone = %s ORDER BY segment DESC LIMIT 1"
    if cur is not None:
        cur.execute(sql, (zone,))
        row = cur.fetchone()
    else:
        rows, _ = meta.run(sql, (zone,))
        row = rows[0] if rows else None
    return _segment(zone, row) if row else None


def history(meta: MetaConfig, zone: str) -> list[Segment]:
    rows, _ = meta.run(f"SELECT {COLUMNS} FROM capture_segments WHERE zone = %s ORDER BY segment", (zone,))
    return [_segment(zone, r) for r in rows]


def first(meta: MetaConfig, zone: str, host: str, port: int, server_id: int, log_file: str, log_pos: int,
          gtid_pos: str | None) -> Segment:  # fmt: skip
    """Segment 0, recorded once (INSERT IGNORE: two passes at once record one)."""
    meta.run(
        "INSERT IGNORE INTO capture_segments (zone, segment, host, port, server_id, first_file, first_pos, gtid_pos, "
        "created_by) VALUES (%s, 0, %s, %s, %s, %s, %s, %s, 'first capture')",
        (zone, host, int(port), int(server_id), log_file, int(log_pos), gtid_pos),
    )
    found = current(meta, zone)
    assert found is not None
    return found


def insert(cur, seg: Segment, by: str) -> None:
    cur.execute(
        f"INSERT INTO capture_segments (zone, {COLUMNS}, created_by) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
        "%s, %s)",
        (seg.zone, seg.segment, seg.host, seg.port, seg.server_id, seg.first_file, seg.first_pos, seg.gtid_pos,
         seg.lsn_file_offset, seg.lsn_floor, seg.lost_gtids, by[:255]),
    )  # fmt: skip


def at_primary(meta: MetaConfig, zone: str, configured: Endpoint) -> Endpoint:
    """The zone's configured Endpoint (its account) at the address of its last promotion;
    as it is when never promoted. Workers and commands ask whenever they (re)connect.
    Meta unreachable: raises (the caller decides)."""
    rows, _ = meta.run(
        "SELECT host, port FROM capture_segments WHERE zone = %s AND segment > 0 ORDER BY segment DESC LIMIT 1",
        (zone,),
    )
    return dataclasses.replace(configured, host=rows[0][0], port=int(rows[0][1])) if rows else configured
