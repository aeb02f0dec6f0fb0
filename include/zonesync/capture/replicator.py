"""The replicator (PiDTS capture, Canal/Otter's node): one zone's binlog -> Kafka.

Protocol, one pass of `run()`:

1. Position: the latest checkpoint in meta, or the zone's current binlog end on
   first start (saved at once as the chain's start, LSN 0).
2. Read the binlog from there (file/position resume; one server_id per reader).
   A transaction is buffered from its GTID event to its Xid, so every event
   knows its row index and the row count of its transaction.
3. Loop filter: transactions whose events carry the skip_replication flag
   (0x8000) were written by an applier and are never published. The filter is
   by session, not by the row's _zs_origin: a row last written in zone a,
   now owned by b and deleted in b, is deleted by b's guard, so b publishes it.
4. At Xid: each row becomes a ChangeEvent with its deterministic LSN and the
   prev_lsn of its partition, queued for its partition. A partition's queue
   is produced as one message (event.py: a JSON array, in LSN order) when it
   holds MAX_MESSAGE_EVENTS, and every queue is produced when the binlog has
   nothing more ready (the end of a burst: a quiet stream sends each
   transaction at once), after `max_linger`, and before a checkpoint is taken.
   The producer is idempotent: retries never duplicate or reorder a message.
5. Checkpoint: every `checkpoint_interval` (or when idle) the position after
   the last Xid, with the per-partition last LSNs, is taken together with how
   many messages each partition had been given; it is saved only once the
   broker acked that many in every partition (acks arrive in order per
   partition).
   Reading never waits for the broker: a crash loses only unsaved checkpoints,
   and restarting from an older one re-publishes the same LSNs.
6. Resend: pending requests in meta rewind the reader to the newest checkpoint
   that re-reads the asked partition from the asked LSN; events up to the old
   high-water mark are re-published with is_retry for the asked partitions
   only. A checkpoint that no longer exists, or a binlog file already purged,
   fails the request ("needs full copy").

Any error (broker gone, zone restarted, a network cut, a corrupt stream) drops
the stream and the producer and starts over from step 1: re-published events
carry the same LSNs and appliers skip what they already have.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

import msgspec
import pymysql
from confluent_kafka import KafkaError, KafkaException, Producer
from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from zonesync import transport
from zonesync.capture.binlog import binlog_end
from zonesync.capture.binlog_stream import LeanBinLogStreamReader
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.capture.event import (
    DELETE,
    INSERT,
    UPDATE,
    ChangeEvent,
    encode_messages,
    file_number,
)
from zonesync.capture.publish import Txn, queue_txn_events
from zonesync.capture.rows import RowDecoder
from zonesync.meta import alerts, topics
from zonesync.meta.db import MetaConfig

log = logging.getLogger("zonesync.replicator")
SKIP_REPLICATION_FLAG = 0x8000
# Statements that appear inside a transaction's GTID group without ending it.
IN_TRANSACTION = ("BEGIN", "SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT", "XA ")
BOOKKEEPING = ("_zs_origin", "_zs_version")
# ER_MASTER_FATAL_ERROR_READING_BINLOG: the server cannot send the binlog from the requested
# position (the file was purged or expired, or the position does not exist)
BINLOG_UNREADABLE = 1236


class ReplicatorError(RuntimeError):
    pass


class EventTooLarge(ReplicatorError):
    """One event is larger than the broker takes (seed case S002-12, a huge LOB). It is
    never truncated and never skipped: nothing is published past it until the limits
    (the producer's and the broker's message.max.bytes) let it through."""

    def __init__(self, payload: bytes):
        doc = msgspec.json.decode(payload)[0]
        self.detail = {"lsn": doc["lsn"], "table": doc["table"], "pk": doc["pk"], "bytes": len(payload)}
        super().__init__(f"an event of {len(payload)} bytes is over the broker's message limit: {self.detail}")


@dataclass
class SourceDB:
    host: str
    port: int
    user: str
    password: str
    schemas: list[str] = field(default_factory=lambda: ["zonesync_app"])

    def settings(self) -> dict:
        return {"host": self.host, "port": self.port, "user": self.user, "passwd": self.password}

    def connect(self):
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password)

    def master_status(self) -> tuple[str, int]:
        conn = self.connect()
        try:
            end = binlog_end(conn)
        finally:
            conn.close()
        if end is None:
            raise ReplicatorError(f"binary logging is off on {self.host}:{self.port}: zones need log_bin")
        return end


class Replicator:
    def __init__(
        self,
        zone: str,
        zone_id: int,
        source: SourceDB,
        meta: MetaConfig,
        server_id: int,
        partitions: int,
        bootstrap=transport.bootstrap,
        checkpoint_interval: float = 0.1,
        resend_poll: float = 0.25,
        topic_of=transport.topic,
        max_linger: float = 0.005,
    ):
        self.zone = zone
        self.zone_id = zone_id
        self.source = source
        self.meta = meta
        self.server_id = server_id
        self.partitions = partitions
        self.bootstrap = bootstrap
        self.checkpoint_interval = checkpoint_interval
        self.max_linger = max_linger
        self.resend_poll = resend_poll
        self.store = CheckpointStore(meta, zone)
        self.topic = topic_of(zone)
        self.stopping = False
        self.server_id_offset = 0
        self._alerted: set[tuple[str, str]] = set()  # (kind, key) of alerts already raised
        self._last_prune = time.monotonic()
        self.published = 0
        self._pks: dict[tuple[str, str], list[str]] = {}
        self.rows = RowDecoder()

    # -- helpers -----------------------------------------------------------------
    def _primary_key(self, schema: str, table: str) -> list[str]:
        key = (schema, table)
        if key not in self._pks:
            conn = self.source.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                        (schema, table),
                    )
                    self._pks[key] = [r[0] for r in cur.fetchall()]
            finally:
                conn.close()
        if not self._pks[key]:
            raise ReplicatorError(f"table {schema}.{table} has no primary key: it cannot be replicated")
        return self._pks[key]

    def _start_checkpoint(self) -> Checkpoint:
        cp = self.store.latest()
        if cp is None:
            log_file, log_pos = self.source.master_status()
            cp = Checkpoint(self.zone, 0, log_file, log_pos, {}, 0)
            self.store.save(cp)
            log.info("replicator %s: first start at %s:%s", self.zone, log_file, log_pos)
        return cp

    def _pending_resends(self) -> list[tuple[int, int, int]]:
        rows, _ = self.meta.run(
            "SELECT id, partition_no, from_lsn FROM resend_requests WHERE source_zone = %s "
            "AND status = 'pending' ORDER BY id",
            (self.zone,),
        )
        return [(int(a), int(b), int(c)) for a, b, c in rows]

    def _finish_requests(self, ids: list[int], status: str, detail: str) -> None:
        if ids:
            self.meta.run(
                f"UPDATE resend_requests SET status = %s, detail = %s, done_at = NOW(6) "
                f"WHERE id IN ({', '.join(['%s'] * len(ids))})",
                (status, detail[:500], *ids),
            )

    # -- the loop ----------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> None:
        """Run until stop(); every failure restarts the pass from the checkpoint."""
        deadline = time.monotonic() + max_seconds if max_seconds else None
        while not self.stopping and (deadline is None or time.monotonic() < deadline):
            try:
                self._pass(deadline)
            except topics.PartitionCountMismatch:
                raise  # configuration: retrying cannot help
            except Exception as exc:  # noqa: BLE001 - any failure: rebuild from the checkpoint
                if self.stopping:
                    break
                if getattr(exc, "args", None) and exc.args[0] == BINLOG_UNREADABLE:
                    self._binlog_unreadable(exc)
                    time.sleep(5)  # nothing is published until the file is back: never a skip
                    continue
                if isinstance(exc, EventTooLarge):
                    self._alert_once("event_too_large", str(exc.detail["lsn"]), exc.detail)
                    time.sleep(5)  # nothing is published past it until the limits are raised
                    continue
                if getattr(exc, "args", None) and exc.args[0] == 4052:
                    # The server still holds the dump thread of our previous connection (a killed
                    # replicator, a dropped stream) and refuses a second reader with its server_id
                    # until it notices. Read under the next server_id of our series instead.
                    self.server_id_offset = (self.server_id_offset + 100) % 1600
                log.warning("replicator %s: %s: restarting from the checkpoint", self.zone, exc)
                self.store.close()
                time.sleep(0.5)

    def stop(self) -> None:
        self.stopping = True

    def _binlog_unreadable(self, exc) -> None:
        """The server cannot serve the binlog from the checkpoint (seed cases S000-53,
        S001-08): the file was purged (PURGE BINARY LOGS, the server's own expiry) or the
        position is gone. Reading on from the oldest file there is would lose every
        change in between, so the replicator publishes nothing, raises one alert per
        position, and keeps asking (an operator may restore the file); otherwise the
        consumers of this zone need a full copy."""
        try:
            cp = self.store.latest()
        except Exception as meta_exc:  # noqa: BLE001 - meta down: the next attempt alerts
            log.warning("replicator %s: binlog unreadable, meta unreachable: %s", self.zone, meta_exc)
            return
        where = f"{cp.log_file}:{cp.log_pos}" if cp else "the zone's first position"
        detail = {
            "checkpoint": where,
            "error": str(exc.args[1] if len(exc.args) > 1 else exc)[:300],
            "action": "restore the binlog file, or rebuild this zone's consumers with a full copy",
        }
        self._alert_once("binlog_unreadable", where, detail)

    def _alert_once(self, kind: str, key: str, detail: dict) -> None:
        """An alert in meta, once per (kind, key) for this process's life."""
        if (kind, key) in self._alerted:
            return
        try:
            alerts.record(self.meta, self.zone, kind, detail)
            self._alerted.add((kind, key))
        except Exception as alert_exc:  # noqa: BLE001 - meta down: the next attempt alerts again
            log.warning("replicator %s: could not record the %s alert: %s", self.zone, kind, alert_exc)

    def _pass(self, deadline: float | None) -> None:
        resend_ids: list[int] = []
        cp = self._start_checkpoint()
        chain_partitions = sorted(cp.partition_lsns)
        requests = self._pending_resends()
        retry_partitions: set[int] | None = None
        retry_until = cp.published_hwm
        if requests:
            starts = []
            for rid, part, from_lsn in requests:
                found = self.store.for_resend(part, from_lsn)
                if found is None:
                    self._finish_requests([rid], "failed", f"no checkpoint re-reads LSN {from_lsn}: needs full copy")
                    continue
                starts.append(found)
                resend_ids.append(rid)
            if starts:
                retry_partitions = {p for _, p, _ in requests}
                retry_until = max(cp.published_hwm, max((c.published_hwm for c in starts), default=0))
                cp = min(starts, key=lambda c: c.lsn)
                log.info(
                    "replicator %s: resending partitions %s from %s:%s",
                    self.zone,
                    sorted(retry_partitions),
                    cp.log_file,
                    cp.log_pos,
                )
        partition_lsns = dict(cp.partition_lsns)
        hwm = max(cp.published_hwm, retry_until)
        errors: list[str] = []
        # Delivery accounting per partition: the broker acks a partition's messages in the
        # order they were produced (idempotent producer), so "acked[p] >= produced[p] at
        # checkpoint C, for every p" proves that everything up to C is stored.
        produced = [0] * self.partitions
        acked = [0] * self.partitions
        pending: dict[int, list[ChangeEvent]] = {}  # events read, not yet produced, per partition
        pending_since = 0.0

        def full(partition: int, events: list[ChangeEvent]) -> None:  # a queue reached its size
            produced[partition] += self._produce(producer, events, partition)

        def on_delivery(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                acked[msg.partition()] += 1

        bootstrap_used = self.bootstrap()

        def on_error(err):
            if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._FATAL):
                errors.append(f"broker connection: {err}")

        # The delivery report callback is the producer's (not one per produce() call: that
        # allocates a holder per message, a fifth of the produce call's cost).
        producer = Producer(
            {**transport.producer_config(bootstrap_used), "error_cb": on_error, "on_delivery": on_delivery}
        )
        try:
            # the topic's partition count, as the broker has it, then as meta recorded it
            topics.check_broker(producer, [self.topic], self.partitions)
            topics.claim(self.meta, self.zone, self.partitions, chain_partitions)
            stream = LeanBinLogStreamReader(
                row_decoder=self.rows,
                connection_settings=self.source.settings(),
                server_id=self.server_id + self.server_id_offset,
                resume_stream=True,
                log_file=cp.log_file,
                log_pos=cp.log_pos,
                blocking=True,
                slave_heartbeat=0.25,
                # A table map is parsed once per table id: a table's id changes with its
                # definition (ALTER makes a new table share), and the library forgets every
                # map at each binlog rotation (ids restart after a server restart, which
                # always starts a new file). Re-parsing it for every transaction was half of
                # the CPU of single-row transactions.
                freeze_schema=True,
                only_events=[
                    GtidEvent,
                    MariadbGtidEvent,
                    XidEvent,
                    QueryEvent,
                    RotateEvent,
                    HeartbeatLogEvent,
                    WriteRowsEvent,
                    UpdateRowsEvent,
                    DeleteRowsEvent,
                ],
                only_schemas=self.source.schemas,
            )
        except Exception:
            producer.flush(5)
            raise
        # Checkpoints in flight: (checkpoint, produced counts when it was taken), oldest first.
        in_flight: deque[tuple[Checkpoint, list[int]]] = deque()
        boundary: tuple[str, int] | None = None  # position after the last commit read
        boundary_dirty = False
        try:
            txn: Txn | None = None
            last_cp_time = time.monotonic()
            last_request_poll = time.monotonic()
            for ev in stream:
                if self.stopping or (deadline and time.monotonic() > deadline):
                    break
                log_file = stream.log_file
                if isinstance(ev, MariadbGtidEvent | GtidEvent):
                    gtid = getattr(ev, "gtid", None) or f"{log_file}:{ev.packet.log_pos}"
                    txn = Txn(str(gtid), bool(ev.packet.flags & SKIP_REPLICATION_FLAG))
                elif isinstance(ev, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                    if txn is None:
                        txn = Txn(f"{log_file}:{ev.packet.log_pos}", False)
                    if ev.packet.flags & SKIP_REPLICATION_FLAG or txn.skip:
                        continue
                    if ev.schema not in self.source.schemas:
                        continue
                    end_pos = ev.packet.log_pos
                    op = (
                        INSERT
                        if isinstance(ev, WriteRowsEvent)
                        else UPDATE
                        if isinstance(ev, UpdateRowsEvent)
                        else DELETE
                    )
                    images = self.rows.images(ev)
                    pk_cols = self._primary_key(ev.schema, ev.table)
                    txn.events.append((ev.table, pk_cols, op, images, end_pos, getattr(ev, "plain", False)))
                    txn.rows += len(images)
                elif isinstance(ev, XidEvent) or (isinstance(ev, QueryEvent) and ev.query.strip().upper() == "COMMIT"):
                    if txn is not None and txn.events and not txn.skip:
                        if not pending:
                            pending_since = time.monotonic()
                        hwm = queue_txn_events(
                            txn,
                            log_file,
                            int(ev.timestamp),
                            (self.zone, self.zone_id, self.partitions),
                            partition_lsns,
                            hwm,
                            retry_partitions,
                            pending,
                            full,
                        )
                    txn = None
                    boundary = (log_file, ev.packet.log_pos)
                    boundary_dirty = True
                elif (
                    isinstance(ev, QueryEvent)
                    and txn is not None
                    and not txn.events
                    and not ev.query.strip().upper().startswith(IN_TRANSACTION)
                ):
                    # A DDL is its own GTID group and ends with no Xid: nothing to publish
                    # (DDL is not replicated), but the position after it is a boundary.
                    txn = None
                    boundary = (log_file, ev.packet.log_pos)
                    boundary_dirty = True
                if errors:
                    raise ReplicatorError(f"broker refused events: {errors[0]}")
                now = time.monotonic()
                if pending and (now - pending_since >= self.max_linger or (txn is None and not stream.data_ready())):
                    # Queued events go out when the binlog has nothing more ready, checked
                    # between transactions (after a published one, a skipped applier's one,
                    # a DDL, a heartbeat), or once they waited max_linger whatever is read:
                    # a transaction still being read is queued only at its commit, so
                    # sending what is queued before it keeps each partition's order.
                    self._flush(producer, pending, produced)
                idle = isinstance(ev, HeartbeatLogEvent)
                if idle and self.bootstrap() != bootstrap_used:
                    raise ReplicatorError("the broker moved (new bootstrap): reconnecting")
                if (
                    idle
                    and txn is None
                    and stream.log_pos
                    and (
                        boundary is None
                        or (file_number(stream.log_file), stream.log_pos) > (file_number(boundary[0]), boundary[1])
                    )
                ):
                    # Idle at the end of the binlog: everything before the server's position
                    # was read, even events that end no transaction (DDL, a binlog checkpoint).
                    # Moving the checkpoint there lets wait_applied(P) succeed on a quiet zone.
                    boundary = (stream.log_file, stream.log_pos)
                    boundary_dirty = True
                if boundary_dirty and (idle or now - last_cp_time >= self.checkpoint_interval):
                    # take a checkpoint at the last commit; it is saved once the broker acked it
                    in_flight.append(self._noted(producer, pending, boundary, partition_lsns, hwm, produced))
                    boundary_dirty = False
                    last_cp_time = now
                if in_flight and txn is None:  # (between transactions: once per transaction, not per event)
                    producer.poll(0)
                    self._save_acked(in_flight, acked, errors)
                if resend_ids and hwm >= retry_until and not boundary_dirty:
                    # everything up to the old high-water mark was re-published: once the
                    # broker acked it, the resend is served
                    self._flush(producer, pending, produced)
                    if producer.flush(5) == 0 and not errors:
                        self._save_acked(in_flight, acked, errors)
                        self._finish_requests(resend_ids, "done", f"resent up to LSN {hwm}")
                        resend_ids = []
                        retry_partitions = None
                if now - self._last_prune >= 60 and txn is None:
                    self._last_prune = now
                    self.store.prune()  # thin the checkpoint history (older ones: one per minute)
                if now - last_request_poll >= self.resend_poll and txn is None:
                    last_request_poll = now
                    if self._pending_resends():
                        self._flush(producer, pending, produced)
                        self._drain(producer, in_flight, acked, errors)
                        return  # start a new pass that rewinds for the request
            if boundary_dirty:
                in_flight.append(self._noted(producer, pending, boundary, partition_lsns, hwm, produced))
            self._flush(producer, pending, produced)
            self._drain(producer, in_flight, acked, errors)
        finally:
            stream.close()
            producer.flush(10)

    def _flush(self, producer: Producer, pending: dict, produced: list[int]) -> None:
        """Every partition's queued events, one message per partition."""
        for partition, events in pending.items():
            produced[partition] += self._produce(producer, events, partition)
        pending.clear()

    def _noted(self, producer, pending, boundary, partition_lsns, hwm, produced) -> tuple[Checkpoint, list[int]]:
        """A checkpoint at `boundary`, with how many messages each partition had been given
        (everything read up to it is produced first: a checkpoint never covers queued events)."""
        self._flush(producer, pending, produced)
        lsn = max(partition_lsns.values(), default=0)
        return Checkpoint(self.zone, lsn, boundary[0], boundary[1], dict(partition_lsns), hwm), list(produced)

    def _save_acked(self, in_flight: deque, acked: list[int], errors: list[str]) -> None:
        """Step 5: save the newest checkpoint the broker acked everything up to."""
        newest = None
        while in_flight and all(a >= n for a, n in zip(acked, in_flight[0][1], strict=True)):
            newest = in_flight.popleft()[0]
        if newest is not None and not errors:
            self.store.save(newest)

    def _drain(self, producer: Producer, in_flight: deque, acked: list[int], errors: list[str]) -> None:
        remaining = producer.flush(5)
        if remaining or errors:
            raise ReplicatorError(f"broker did not ack {remaining} events ({errors[:1]}): checkpoint not advanced")
        self._save_acked(in_flight, acked, errors)

    def _produce(self, producer: Producer, events: list[ChangeEvent], partition: int) -> int:
        """Produce a partition's events, in order; returns how many messages that took."""
        payloads = encode_messages(events)
        for payload in payloads:
            # No key: the partition is chosen here (transport.partition_of, per row), and a
            # message holds many rows.
            while True:
                try:
                    producer.produce(self.topic, value=payload, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    if isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                        raise EventTooLarge(payload) from exc
                    raise ReplicatorError(f"produce failed: {exc}") from exc
        self.published += len(events)
        return len(payloads)
