"""The replicator lease: one process captures a zone at a time (seed S001-11).

Two replicators of one zone (a failover overlap, an operator starting a second by
mistake) would both read the binlog and both write checkpoints. Their events are the
same (LSNs are derived from binlog positions), so targets would skip the duplicates,
but two writers of one checkpoint history can move it backwards, and resend requests
would be served twice. So a zone's replicator holds a lease row in meta:

1. Acquire: a process takes the lease when nobody holds it, when it has expired, or
   when its holder's process is gone from this host (a kill -9: no need to wait out the
   TTL). Otherwise it is a standby and asks again every `poll` seconds.
2. Renew: the holder renews every TTL/3, and in the same meta transaction as every
   checkpoint it saves (CheckpointStore.save): that UPDATE matches no row once another
   process took the lease over, so a holder paused past its lease (SIGSTOP, a long GC,
   cut off from meta) can never write a checkpoint again; it learns it lost the lease
   (LeaseLost), stops reading and becomes a standby.
3. Release: a replicator that stops cleanly gives the lease up, so the next one starts
   at once.

Events a deposed holder published after the takeover are exact copies of what the new
holder re-reads from the checkpoint; appliers skip them by LSN.
"""

from __future__ import annotations

import os
import socket
import uuid

import pymysql

from zonesync.meta.db import MetaConfig

DEFAULT_TTL = 10.0


class LeaseLost(RuntimeError):
    """Another replicator took this zone's lease over: stop reading, write nothing."""


def new_holder(zone: str) -> str:
    """`zs:<zone>:<host>:<pid>:<nonce>`: unique per Replicator (tests run several in one
    process), and it names the host and process an operator would look for. It is also
    the name the reader registers under in SHOW SLAVE HOSTS (binlog.clashing_reader)."""
    return f"zs:{zone}:{socket.gethostname()[:24]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def holder_gone(holder: str) -> bool:
    """True when `holder` was a process of this host that no longer exists."""
    parts = holder.split(":")
    if len(parts) != 5 or parts[2] != socket.gethostname()[:24] or not parts[3].isdigit():
        return False
    try:
        os.kill(int(parts[3]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class ReplicatorLease:
    def __init__(self, meta: MetaConfig, zone: str, server_id: int, ttl: float = DEFAULT_TTL):
        self.meta = meta
        self.zone = zone
        self.server_id = server_id
        self.ttl = ttl
        self.holder = new_holder(zone)

    @property
    def _ttl_us(self) -> int:
        return int(self.ttl * 1_000_000)

    def acquire(self) -> str | None:
        """Step 1. None when this process holds the lease now, else who holds it."""
        try:
            with self.meta.transaction() as cur:
                cur.execute(
                    "SELECT holder, expires_at > NOW(6) FROM replicator_leases WHERE zone = %s FOR UPDATE", (self.zone,)
                )
                row = cur.fetchone()
                if row is None:
                    cur.execute(
                        "INSERT INTO replicator_leases (zone, holder, server_id, expires_at) "
                        "VALUES (%s, %s, %s, NOW(6) + INTERVAL %s MICROSECOND)",
                        (self.zone, self.holder, self.server_id, self._ttl_us),
                    )
                    return None
                holder, live = row[0], bool(row[1])
                if holder != self.holder and live and not holder_gone(holder):
                    return holder
                cur.execute(
                    "UPDATE replicator_leases SET acquired_at = IF(holder = %s, acquired_at, NOW(6)), holder = %s, "
                    "server_id = %s, expires_at = NOW(6) + INTERVAL %s MICROSECOND WHERE zone = %s",
                    (self.holder, self.holder, self.server_id, self._ttl_us, self.zone),
                )
                return None
        except pymysql.err.IntegrityError:
            return "another replicator (it took the lease at the same instant)"

    def renew(self, cur=None) -> None:
        """Step 2, on its own or inside the caller's transaction (`cur`): raises LeaseLost
        when the lease is no longer this process's."""
        sql = (
            "UPDATE replicator_leases SET expires_at = NOW(6) + INTERVAL %s MICROSECOND WHERE zone = %s AND holder = %s"
        )
        args = (self._ttl_us, self.zone, self.holder)
        if cur is not None:
            changed = cur.execute(sql, args)
        else:
            conn = self.meta.connect()
            try:
                with conn.cursor() as own:
                    changed = own.execute(sql, args)
            finally:
                conn.close()
        if not changed:
            raise LeaseLost(f"zone {self.zone}'s replicator lease was taken over: this process stops capturing")

    def release(self) -> None:
        """Step 3 (best effort: an unreleased lease only expires)."""
        try:
            self.meta.run("DELETE FROM replicator_leases WHERE zone = %s AND holder = %s", (self.zone, self.holder))
        except Exception:  # noqa: BLE001, S110 - meta down: the lease expires on its own
            pass

    def current(self) -> tuple[str, object] | None:
        """(holder, expires_at) of the zone's lease, for status output."""
        rows, _ = self.meta.run("SELECT holder, expires_at FROM replicator_leases WHERE zone = %s", (self.zone,))
        return (rows[0][0], rows[0][1]) if rows else None
