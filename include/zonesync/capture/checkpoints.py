"""Replicator checkpoints in the meta store, with their history.

A checkpoint is written only after the broker acked every event up to it, at a
commit (Xid) boundary: (log file, position after the Xid, the last LSN
published to each partition, the highest LSN ever published). The history is
what makes resends and replays exact: restarting from a checkpoint regenerates
the same events with the same LSN and prev_lsn, because partition_lsns is the
prev_lsn state at that position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from zonesync.events import file_number
from zonesync.meta.db import MetaConfig

HISTORY_KEEP = 5000


@dataclass
class Checkpoint:
    zone: str
    lsn: int
    log_file: str
    log_pos: int
    partition_lsns: dict[int, int] = field(default_factory=dict)
    published_hwm: int = 0
    # events published per partition since the chain began (None: not counted, see 0007)
    partition_counts: dict[int, int] | None = field(default_factory=dict)
    # the server it was read on (segments.py: positions mean something only there) and the
    # GTID state at its position (gtid.py: where to go on in another server's binlog)
    segment: int = 0
    gtid_pos: str | None = None


def _row(zone, r) -> Checkpoint:
    counts = None if r[5] is None else {int(k): int(v) for k, v in json.loads(r[5]).items()}
    lsns = {int(k): v for k, v in json.loads(r[3]).items()}
    return Checkpoint(zone, int(r[0]), r[1], int(r[2]), lsns, int(r[4]), counts, int(r[6]), r[7])


COLUMNS = "lsn, log_file, log_pos, partition_lsns, published_hwm, partition_counts, segment, gtid_pos"


class CheckpointStore:
    def __init__(self, meta: MetaConfig, zone: str, lease=None):
        self.meta = meta
        self.zone = zone
        self.lease = lease  # a ReplicatorLease: every save renews it in the same transaction
        self._conn = None

    def _cur(self):
        if self._conn is None:
            self._conn = self.meta.connect()
        return self._conn.cursor()

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def save(self, cp: Checkpoint) -> None:
        """Insert a checkpoint; with a lease, only while this process still holds it (the
        renewal and the insert commit together, or neither does: LeaseLost)."""
        try:
            with self._cur() as cur:
                if self.lease is not None:
                    self._conn.begin()
                    self.lease.renew(cur)
                cur.execute(
                    f"INSERT INTO replicator_checkpoints (zone, {COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s) "
                    "ON DUPLICATE KEY UPDATE log_file = VALUES(log_file), log_pos = VALUES(log_pos), "
                    "partition_lsns = VALUES(partition_lsns), published_hwm = GREATEST(published_hwm, "
                    "VALUES(published_hwm)), partition_counts = VALUES(partition_counts), "
                    "segment = VALUES(segment), gtid_pos = VALUES(gtid_pos)",
                    (
                        self.zone,
                        cp.lsn,
                        cp.log_file,
                        cp.log_pos,
                        json.dumps(cp.partition_lsns),
                        cp.published_hwm,
                        None if cp.partition_counts is None else json.dumps(cp.partition_counts),
                        cp.segment,
                        cp.gtid_pos,
                    ),
                )
                if self.lease is not None:
                    self._conn.commit()
        except Exception:
            self.close()
            raise

    def prune(self) -> int:
        """Thin the history: the newest HISTORY_KEEP checkpoints stay (one every 100 ms is
        about eight minutes of them), older ones keep the first of each minute, and the
        chain's first stays, as does each segment's first (a failover's: segments.py).
        Resends and replays can still reach back as far as before, re-reading at most a
        minute more binlog."""
        with self._cur() as cur:
            cur.execute(
                "SELECT lsn FROM replicator_checkpoints WHERE zone = %s ORDER BY lsn DESC LIMIT 1 OFFSET %s",
                (self.zone, HISTORY_KEEP),
            )
            row = cur.fetchone()
            if not row:
                return 0
            return cur.execute(
                "DELETE c FROM replicator_checkpoints c JOIN (SELECT DATE_FORMAT(created_at, '%%Y%%m%%d%%H%%i') m, "
                "MIN(lsn) keep_lsn FROM replicator_checkpoints WHERE zone = %s AND lsn <= %s GROUP BY m) k "
                "ON DATE_FORMAT(c.created_at, '%%Y%%m%%d%%H%%i') = k.m WHERE c.zone = %s AND c.lsn <= %s "
                "AND c.lsn <> k.keep_lsn AND c.lsn NOT IN (SELECT m FROM (SELECT MIN(lsn) m FROM "
                "replicator_checkpoints WHERE zone = %s GROUP BY segment) x)",
                (self.zone, row[0], self.zone, row[0], self.zone),
            )

    def first_at_or_past(self, log_file: str, log_pos: int, server_id: int | None = None) -> Checkpoint | None:
        """The oldest checkpoint at or past a binlog position, comparing file numbers as
        numbers (as strings, binlog.999999 would sort after binlog.1000000). Positions
        mean something only on their server (segments.py): only the checkpoints of the
        newest segment read on `server_id` (the server the position was read on: none
        when capture never read it), or without it, of the newest segment."""
        number = file_number(log_file)
        if server_id is None:
            which, args = "(SELECT MAX(segment) FROM replicator_checkpoints WHERE zone = %s)", (self.zone,)
        else:
            which = (  # (no segment recorded yet: capture ran before they were; any server)
                "(SELECT CASE WHEN EXISTS (SELECT 1 FROM capture_segments WHERE zone = %s) THEN (SELECT "
                "COALESCE(MAX(segment), -1) FROM capture_segments WHERE zone = %s AND server_id = %s) ELSE "
                "(SELECT MAX(segment) FROM replicator_checkpoints WHERE zone = %s) END)"
            )
            args = (self.zone, self.zone, server_id, self.zone)
        with self._cur() as cur:
            cur.execute(
                f"SELECT {COLUMNS} FROM replicator_checkpoints WHERE zone = %s AND segment = {which} AND "
                "(CAST(SUBSTRING_INDEX(log_file, '.', -1) AS UNSIGNED) > %s OR "
                "(CAST(SUBSTRING_INDEX(log_file, '.', -1) AS UNSIGNED) = %s AND log_pos >= %s)) ORDER BY lsn LIMIT 1",
                (self.zone, *args, number, number, log_pos),
            )
            r = cur.fetchone()
        return _row(self.zone, r) if r else None

    def latest(self) -> Checkpoint | None:
        with self._cur() as cur:
            cur.execute(
                f"SELECT {COLUMNS} FROM replicator_checkpoints WHERE zone = %s ORDER BY lsn DESC LIMIT 1", (self.zone,)
            )
            r = cur.fetchone()
        return _row(self.zone, r) if r else None

    def for_resend(self, partition: int, from_lsn: int) -> Checkpoint | None:
        """The newest checkpoint from which partition's successor of `from_lsn` is re-read.

        At a checkpoint whose partition_lsns[partition] <= from_lsn, every later event of
        that partition comes after from_lsn: restarting there regenerates them all.
        """
        with self._cur() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM replicator_checkpoints WHERE zone = %s ORDER BY lsn DESC", (self.zone,))
            for r in cur:
                cp = _row(self.zone, r)
                if cp.partition_lsns.get(partition, 0) <= from_lsn:
                    return cp
        return None

    def history(self) -> list[Checkpoint]:
        with self._cur() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM replicator_checkpoints WHERE zone = %s ORDER BY lsn", (self.zone,))
            return [_row(self.zone, r) for r in cur.fetchall()]
