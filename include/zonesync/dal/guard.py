"""The guard instance: Keepalive with the meta store, the lease, transactions.

Protocol, as the seed's PiDAL Keepalive (000, "PiDAL 实例 Keepalive"):

1. start: register (zone, host, pid, period) and load the newest version before
   accepting any write.
2. every `poll` (default 100 ms): read the head version (one primary-key read).
   A newer version is loaded whole, in one snapshot of meta (the head read again
   in it: entities are updated in place, and reads in separate snapshots could
   miss one published meanwhile), swapped in under the exclusive lock (which
   waits for in-flight commits), then acked in guard_instances and guard_acks.
   So a push is acked within about one poll, well under a second.
3. every `period` (default 5 s): heartbeat. The meta store calls an instance
   unhealthy after 4 missed periods.
4. fail closed: a successful poll renews the lease; when the last one is older
   than `lease` (default 3 periods), every write is refused (GuardNotSynced)
   until a poll succeeds again. The lease is shorter than the 4 periods after
   which push-and-wait stops waiting for a silent instance, so by the time a
   change goes ahead without an instance's ack, that instance already refuses
   writes. The seed relies on a partitioned instance being unable to reach its
   database too; we do not assume that, hence stricter.
5. close: deregister. An instance killed -9 stays registered, turns unhealthy,
   and blocks the next change until it is restarted or forgotten.

Failures: a meta error in the loop is logged, the connection dropped and made
again next poll; the lease decides when writes stop.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import socket
import threading
import time
import uuid
from contextlib import contextmanager

import pymysql

from zonesync.dal.errors import GuardError, GuardNotSynced
from zonesync.dal.hlc import HybridClock
from zonesync.dal.rwlock import RWLock
from zonesync.dal.state import GuardState
from zonesync.meta.db import MetaConfig, MetaError
from zonesync.meta.guards import MISSED_BEATS_UNHEALTHY
from zonesync.rules.model import parse
from zonesync.runtime.endpoints import Endpoint

log = logging.getLogger("zonesync.guard")


def ZoneDB(host: str, port: int, user: str, password: str, database: str) -> Endpoint:
    """Where this zone's application database is: an `Endpoint` (the guard names the zone)."""
    return Endpoint("", host, port, user, password, database)


# The application's own transactions: not autocommit, UTC, and no read timeout (a statement
# may wait on a row lock as long as the server's lock wait timeout allows).
ZONE_SESSION = {"autocommit": False, "read_timeout": None, "init_command": "SET time_zone = '+00:00'"}


class Guard:
    def __init__(
        self,
        meta: MetaConfig,
        zone: str,
        zone_db: Endpoint,
        period: float = 5.0,
        poll: float = 0.1,
        lease: float | None = None,
        clock: HybridClock | None = None,
    ):
        if period < 0.1:
            raise GuardError(f"period={period}: the keepalive period cannot be under 0.1 s")
        lease = lease if lease is not None else 3 * period
        if not 0 < lease < MISSED_BEATS_UNHEALTHY * period:
            raise GuardError(
                f"lease={lease} must be positive and shorter than {MISSED_BEATS_UNHEALTHY} periods "
                f"({MISSED_BEATS_UNHEALTHY * period:.1f} s): otherwise a change could proceed without this "
                "instance while it still accepts writes"
            )
        self.meta = meta
        self.zone = zone
        self.zone_db = zone_db
        self.period = period
        self.poll = min(poll, period)
        self.lease = lease
        self.clock = clock or HybridClock()
        self.instance_id = f"{zone}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.state = GuardState(0, zone, None)
        self.zone_id: int | None = None
        self.lock = RWLock()
        self._last_sync = 0.0
        self._meta_conn = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: queue.LifoQueue = queue.LifoQueue()
        self._table_meta: dict[str, tuple[list[str], list[str]]] = {}
        self.refused = 0

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout: float = 10.0) -> Guard:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._register()
                self._sync()
                break
            except (pymysql.err.Error, OSError, MetaError) as exc:
                self._drop_meta()
                if time.monotonic() > deadline:
                    raise GuardError(f"guard for zone {self.zone} could not reach the meta store: {exc}") from None
                time.sleep(0.2)
        self._thread = threading.Thread(target=self._keepalive, name=f"guard-{self.zone}", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        return self

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        try:
            with self._meta().cursor() as cur:
                cur.execute("DELETE FROM guard_instances WHERE instance_id = %s", (self.instance_id,))
        except (pymysql.err.Error, OSError, MetaError):
            pass  # killed-like exit (meta unreachable too): the registry will show it unhealthy
        self._drop_meta()
        while not self._pool.empty():
            try:
                self._pool.get_nowait().close()
            except (pymysql.err.Error, OSError, queue.Empty):
                pass

    # -- meta side -----------------------------------------------------------
    def _meta(self):
        if self._meta_conn is None:
            self._meta_conn = self.meta.connect(timeout=2.0)
        return self._meta_conn

    def _drop_meta(self) -> None:
        if self._meta_conn is not None:
            try:
                self._meta_conn.close()
            except (pymysql.err.Error, OSError):
                pass
            self._meta_conn = None

    def _register(self) -> None:
        with self._meta().cursor() as cur:
            cur.execute("SELECT zone_id FROM zones WHERE name = %s", (self.zone,))
            row = cur.fetchone()
            if row is None:
                raise GuardError(f"zone {self.zone!r} is not in the meta store: add it (zonesync meta migrate --zones)")
            self.zone_id = int(row[0])
            cur.execute(
                "INSERT INTO guard_instances (instance_id, zone_id, host, pid, period_ms) VALUES (%s,%s,%s,%s,%s) "
                "ON DUPLICATE KEY UPDATE last_heartbeat = NOW(6)",
                (self.instance_id, self.zone_id, socket.gethostname(), os.getpid(), int(self.period * 1000)),
            )

    def _load(self) -> GuardState:
        """The state published up to the head, all read in one snapshot of meta. Entities
        are updated in place (a row holds its newest version): read in separate snapshots,
        an entity published after the head was read would be missing (its row's version
        above it), and its writes judged by the ZSID rules alone, where a moved or stopped
        entity's must be refused. In one snapshot, every row it shows is <= its head."""
        conn = self._meta()
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # a snapshot needs it
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                cur.execute("SELECT version FROM head WHERE id = 1")
                version = int(cur.fetchone()[0])
                cur.execute("SELECT rule_set FROM versions WHERE kind = 'rules' ORDER BY version DESC LIMIT 1")
                row = cur.fetchone()
                cur.execute(
                    "SELECT e.le_type, e.le_id, z.name, e.stop_write FROM locating_entities e "
                    "JOIN zones z ON z.zone_id = e.unit_zone"
                )
                entities = {(t, i): (z, bool(s)) for t, i, z, s in cur.fetchall()}
                cur.execute("SELECT version, rule_set FROM versions WHERE kind = 'tags' ORDER BY version DESC LIMIT 1")
                tags = cur.fetchone()
            finally:
                conn.commit()
        rules = parse(json.loads(row[0]), f"rules <= v{version}") if row else None
        tags_version, trees = self._kv_trees(tags)
        return GuardState(version, self.zone, rules, entities, tags_version, trees)

    def _kv_trees(self, row) -> tuple[int, dict]:
        """(tag rules version, KV repo -> PatternTree) of the tag rules row `row`: the
        current state's trees when the version is the same (built once per tag rules
        version, not at every entity change)."""
        if row is None:
            return 0, {}
        if int(row[0]) == self.state.tags_version:
            return self.state.tags_version, self.state.kv_trees
        from zonesync.tagging.rules import parse as parse_tags

        return int(row[0]), parse_tags(json.loads(row[1]), f"tag rules v{row[0]}").trees()

    def _sync(self) -> None:
        """One poll: read head; load, swap and ack a newer version; renew the lease."""
        with self._meta().cursor() as cur:
            cur.execute("SELECT version FROM head WHERE id = 1")
            head = int(cur.fetchone()[0])
        if head > self.state.version or self._last_sync == 0.0:
            new = self._load()  # (its head: this one or newer)
            head = new.version
            with self.lock.exclusive():  # waits for commits validated against the old version
                self.state = new
            with self._meta().cursor() as cur:
                cur.execute(
                    "UPDATE guard_instances SET version_applied = %s, applied_at = NOW(6), last_heartbeat = NOW(6) "
                    "WHERE instance_id = %s",
                    (head, self.instance_id),
                )
                if cur.rowcount == 0:  # forgotten while we were away: register again
                    self._register()
                    cur.execute(
                        "UPDATE guard_instances SET version_applied = %s, applied_at = NOW(6) WHERE instance_id = %s",
                        (head, self.instance_id),
                    )
                cur.execute(
                    "INSERT IGNORE INTO guard_acks (instance_id, version) VALUES (%s, %s)", (self.instance_id, head)
                )
        self._last_sync = time.monotonic()

    def _heartbeat(self) -> None:
        """Alive, and the version this instance runs, again (S000-08): an ack that was lost
        (meta dropped the connection after the swap, before the ack's write) is made good
        within one period, instead of waiting for the next version while a step waits for
        it. Never moves the recorded version back."""
        version = self.state.version
        with self._meta().cursor() as cur:
            cur.execute(
                "UPDATE guard_instances SET last_heartbeat = NOW(6), "
                "applied_at = IF(version_applied < %s, NOW(6), applied_at), "
                "version_applied = GREATEST(version_applied, %s) WHERE instance_id = %s",
                (version, version, self.instance_id),
            )
            if cur.rowcount == 0:
                self._register()
            elif version:
                cur.execute("INSERT IGNORE INTO guard_acks (instance_id, version) VALUES (%s, %s)",
                            (self.instance_id, version))  # fmt: skip

    def _keepalive(self) -> None:
        next_beat = time.monotonic() + self.period
        while not self._stop.wait(self.poll):
            try:
                self._sync()
                if time.monotonic() >= next_beat:
                    self._heartbeat()
                    next_beat = time.monotonic() + self.period
            except (pymysql.err.Error, OSError, GuardError, MetaError) as exc:
                log.warning("guard %s: meta store sync failed: %s", self.instance_id, exc)
                self._drop_meta()
            except Exception:  # noqa: BLE001 - the keepalive must outlive any bug; the lease fails closed
                log.exception("guard %s: unexpected error in keepalive", self.instance_id)
                self._drop_meta()

    # -- write side ------------------------------------------------------------
    def synced(self) -> bool:
        return self._last_sync > 0 and time.monotonic() - self._last_sync <= self.lease

    def require_synced(self) -> None:
        if not self.synced():
            age = time.monotonic() - self._last_sync if self._last_sync else float("inf")
            raise GuardNotSynced(
                f"guard {self.instance_id} has not synced with the meta store for {age:.1f} s "
                f"(lease {self.lease:.1f} s): writes are refused until it does"
            )

    def _conn(self):
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            return self.zone_db.connect(**ZONE_SESSION)

    def _release(self, conn, healthy: bool) -> None:
        if healthy and self._pool.qsize() < 32:
            self._pool.put(conn)
        else:
            try:
                conn.close()
            except (pymysql.err.Error, OSError):
                pass

    @contextmanager
    def transaction(self):
        """A guarded transaction: committed on leaving the block, rolled back on error."""
        from zonesync.dal.transaction import Transaction

        conn = self._conn()
        tx = Transaction(self, conn)
        healthy = True
        try:
            yield tx
            tx.commit()
        except BaseException as exc:
            healthy = not isinstance(exc, (pymysql.err.OperationalError, pymysql.err.InterfaceError))
            tx.rollback()
            if isinstance(exc, GuardError):
                self.refused += 1
            raise
        finally:
            self._release(conn, healthy)

    def table_meta(self, table: str) -> tuple[list[str], list[str]]:
        """(primary-key columns, all columns) of `table`, checked against the table contract once.

        Read on a connection of its own: the caller's transaction must not be touched.
        """
        from zonesync.dal.transaction import load_table_meta

        if table not in self._table_meta:
            conn = self.zone_db.connect(**ZONE_SESSION)
            try:
                self._table_meta[table] = load_table_meta(conn, table)
            finally:
                conn.close()
        return self._table_meta[table]
