"""The replicator (PiDTS capture, Canal/Otter's node): one zone's binlog -> Kafka.

Protocol, one pass of `run()`:

0. Lease: only the holder of the zone's replicator lease reads (lease.py); another
   process of the same zone waits as a standby and takes over when the holder stops
   or dies. Every checkpoint is saved in one meta transaction with a lease renewal.
1. Position: the latest checkpoint in meta, or the zone's current binlog end on
   first start (saved at once as the chain's start, LSN 0). A zone captured before
   whose checkpoints are gone is refused (start.py): never a silent restart at the end.
   The server read is the one the zone's newest capture segment names (segments.py):
   after a failover, the promoted replica, with the checkpoint mapped onto its binlog by
   GTID and LSNs that go on above the old primary's (failover.py, docs/failover.md); a
   different server answering at the address is refused until mapped (PrimaryChanged).
   Each checkpoint carries the GTID state at its position.
2. Read the binlog from there (file/position resume). The reader registers under the
   lease holder's name; a server_id another reader already uses is refused, with an
   alert, rather than cutting that reader off (faults.ServerIdClash).
   A transaction is buffered from its GTID event to its Xid, so every event knows
   its row index and the row count of its transaction. One that grows past
   `large_txn_rows` (seed S002-11: a mass UPDATE) is not buffered: its events are
   dropped as they are read and only counted, and at its Xid the pass ends (its
   checkpoint is the commit before it) and the next pass reads it again, queueing
   each rows event as it is read with the row count and commit time now known, so
   memory stays bounded by the queues. The binlog holds only committed transactions,
   so publishing before the Xid is read is safe; the checkpoint still never points
   inside one, and a crash re-reads it whole.
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
the stream and the producer and starts over from step 0: re-published events
carry the same LSNs and appliers skip what they already have. Faults a restart
cannot fix (a purged binlog file, an oversize event, a server_id clash) raise one
alert each and are retried every few seconds (faults.py).
"""

from __future__ import annotations

import datetime
import logging
import time

from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from zonesync.capture import ddl, gtid, resend_plan, segments
from zonesync.capture.binlog import registered_reader
from zonesync.capture.binlog_stream import open_reader
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.capture.delivery import Delivery, last_published_lsn
from zonesync.capture.faults import (
    BINLOG_UNREADABLE,
    RETRY_SECONDS,
    SERVER_ID_TAKEN,
    CaptureFault,
    FaultReporter,
    PrimaryChanged,
    ServerIdClash,
)
from zonesync.capture.lag import CaptureLag
from zonesync.capture.lease import DEFAULT_TTL, LeaseLost, ReplicatorLease
from zonesync.capture.pass_state import PassState
from zonesync.capture.publish import Txn, close_txn
from zonesync.capture.rows import RowDecoder
from zonesync.capture.source import SourceDB, SourceSettings
from zonesync.capture.start import NoCheckpoint, start_checkpoint
from zonesync.events import (
    DELETE,
    INSERT,
    UPDATE,
    file_number,
)
from zonesync.meta import resends, schema_changes, topics
from zonesync.meta.db import MetaConfig
from zonesync.meta.outage import MetaOutage
from zonesync.runtime import transport

log = logging.getLogger("zonesync.replicator")
SKIP_REPLICATION_FLAG = 0x8000
# Statements that appear inside a transaction's GTID group without ending it.
IN_TRANSACTION = ("BEGIN", "SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT", "XA ")
BOOKKEEPING = ("_zs_origin", "_zs_version")


# What a handler returns besides None (go on to the periodic work): _NEXT, read the next
# event (a rows event filtered out); _ENDED, the pass ended (it drained what it had).
_NEXT = object()
_ENDED = object()


class ReplicatorError(RuntimeError):
    pass


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
        lease_ttl: float = DEFAULT_TTL,
        large_txn_rows: int = 50_000,
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
        self.lease = ReplicatorLease(meta, zone, server_id, lease_ttl)
        self.store = CheckpointStore(meta, zone, lease=self.lease)
        self.faults = FaultReporter(meta, zone)
        self.topic = topic_of(zone)
        self.stopping = False
        self.standby_for: str | None = None  # who holds the lease while this one waits
        self._renewed = 0.0
        # meta unreachable (seed S003-03): capture goes on; checkpoints, lease renewals,
        # resend polls and pruning are retried every second (meta/outage.py)
        self.meta_outage = MetaOutage(f"replicator {zone}", log, on_failure=self.store.close)
        self.large_txn_rows = large_txn_rows
        self._settings_checked = False
        self._large_txns: dict[str, tuple[int, int]] = {}  # txn id -> (rows, commit time), counted
        self.peak_buffered_rows = 0
        # (log_file, log_pos, commit time) after the last transaction read; None: nothing yet
        self.read_at: tuple[str, int, float | None] | None = None
        self._last_prune = time.monotonic()
        self._published_before = 0
        self._delivery: Delivery | None = None
        self.rows = RowDecoder()

    def _start_checkpoint(self) -> Checkpoint:
        try:
            return start_checkpoint(self.store, self.meta, self.zone, self.source.master_status, lease=self.lease)
        except NoCheckpoint as exc:
            self.faults.once("no_checkpoint", self.zone, {"error": str(exc)})
            raise

    def _check_settings(self) -> None:
        """Once per process: refuse a zone whose binlog cannot be captured whole (S003-28),
        and say once when its commits are not durable (S002-04)."""
        try:
            warnings = self.source.check_capture_settings()
        except SourceSettings as exc:
            self.faults.once("binlog_settings", self.zone, {"error": str(exc)})
            raise
        for warning in warnings:
            log.warning("replicator %s: %s", self.zone, warning)
        self._settings_checked = True

    def _clashing_reader(self) -> str | None:
        """Another reader registered with our server_id (not a replicator of this zone:
        while this process holds the lease, those are stale connections of deposed or
        dead holders, which connecting cuts off as it should)."""
        conn = self.source.connect()
        try:
            other = registered_reader(conn, self.server_id)
        finally:
            conn.close()
        return None if other is None or other.startswith(f"zs:{self.zone}:") else other

    def _hold_lease(self) -> bool:
        """Step 0: True when this process may read; else it is a standby for now."""
        try:
            holder = self.lease.acquire()
        except Exception as exc:  # noqa: BLE001 - meta unreachable: nobody can hold it now
            log.warning("replicator %s: cannot reach meta for the lease: %s", self.zone, exc)
            return False
        if holder is None:
            if self.standby_for is not None:
                log.info("replicator %s: took the lease over from %s", self.zone, self.standby_for)
            self.standby_for = None
            self._renewed = time.monotonic()
            return True
        if holder != self.standby_for:
            log.info("replicator %s: standby: %s holds the zone's lease", self.zone, holder)
        self.standby_for = holder
        return False

    # -- the loop ----------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> None:
        """Run until stop(); every failure restarts the pass from the checkpoint."""
        deadline = time.monotonic() + max_seconds if max_seconds else None
        lag = CaptureLag(self.zone, self.source, self.meta, lambda: self.read_at).start()
        try:
            while not self.stopping and (deadline is None or time.monotonic() < deadline):
                if not self._hold_lease():
                    time.sleep(min(1.0, self.lease.ttl / 4))
                    continue
                try:
                    self._pass(deadline)
                except (topics.PartitionCountMismatch, NoCheckpoint, SourceSettings):
                    raise  # configuration: retrying cannot help
                except LeaseLost as exc:
                    log.warning("replicator %s: %s", self.zone, exc)
                    self.store.close()
                except Exception as exc:  # noqa: BLE001 - any failure: rebuild from the checkpoint
                    if self.stopping:
                        break
                    self.store.close()
                    if self._unfixable_by_restart(exc):
                        time.sleep(RETRY_SECONDS)  # nothing is published until the cause is gone
                        continue
                    log.warning("replicator %s: %s: restarting from the checkpoint", self.zone, exc)
                    time.sleep(0.5)
        finally:
            lag.stop()
            self.store.close()
            if self.standby_for is None:
                self.lease.release()

    def stop(self) -> None:
        self.stopping = True

    def _unfixable_by_restart(self, exc: Exception) -> bool:
        """Faults that a new pass cannot fix: alert once (faults.py), and retry slowly."""
        code = exc.args[0] if getattr(exc, "args", None) else None
        if isinstance(exc, CaptureFault):
            self.faults.fault(exc)
        elif code == BINLOG_UNREADABLE:
            try:
                self.faults.binlog_unreadable(exc, self.store.latest())
            except Exception as meta_exc:  # noqa: BLE001 - meta down: the next attempt alerts
                log.warning("replicator %s: binlog unreadable, meta unreachable: %s", self.zone, meta_exc)
        elif code == SERVER_ID_TAKEN:
            # Another reader connected with our server_id and the server dropped us for it.
            # Reconnecting would cut it off in turn: first see whether it registered.
            other = self._clashing_reader() or "a reader that did not register (SHOW SLAVE HOSTS)"
            self.faults.fault(ServerIdClash(self.server_id, other))
        else:
            return False
        log.warning("replicator %s: %s: retrying in %.0f s", self.zone, exc, RETRY_SECONDS)
        return True

    # -- one pass: open, read (one handler per event kind, then tick), end --------
    def _pass(self, deadline: float | None) -> None:
        s, stream = self._open_pass()
        try:
            if not self._read(s, stream, deadline):
                self._end_pass(s)
        finally:
            stream.close()
            s.delivery.producer.flush(10)
            self._published_before += s.delivery.published
            self._delivery = None

    def _open_pass(self) -> tuple[PassState, object]:
        """Steps 1, 2 and 6: the position to read from (a resend rewinds it), the producer,
        the topic's partition count checked, the stream opened."""
        if not self._settings_checked:
            self._check_settings()
        cp = self._start_checkpoint()
        segment = self._follow_primary(cp)
        other = self._clashing_reader()
        if other is not None:
            raise ServerIdClash(self.server_id, other)
        chain_partitions = sorted(cp.partition_lsns)
        plan = resend_plan.plan(self.meta, self.zone, self.store, self.source.binlog_files, cp)
        cp = plan.start
        if plan.request_ids:
            log.info("replicator %s: resending partitions %s from %s:%s",
                     self.zone, sorted(plan.partitions), cp.log_file, cp.log_pos)  # fmt: skip
        hwm = max(cp.published_hwm, plan.until)
        if not plan.request_ids:
            # After a restart the events past the checkpoint are read again; those the topic
            # already holds go out marked is_retry (informational: appliers go by LSN). Not in
            # a resend pass: there, events of other partitions up to hwm are not produced at all.
            hwm = max(hwm, last_published_lsn(self.bootstrap(), self.topic, self.partitions))
        bootstrap_used = self.bootstrap()
        delivery = self._delivery = Delivery(bootstrap_used, self.topic, self.partitions)
        s = PassState(
            zone=self.zone,
            source=(self.zone, self.zone_id, self.partitions),
            delivery=delivery,
            bootstrap_used=bootstrap_used,
            partition_lsns=dict(cp.partition_lsns),
            partition_counts=None if cp.partition_counts is None else dict(cp.partition_counts),
            hwm=hwm,
            resend_ids=plan.request_ids,
            retry_partitions=plan.partitions,
            retry_until=plan.until,
            segment=segment.segment,
            lsn_file_offset=segment.lsn_file_offset,
            lsn_floor=segment.lsn_floor,
            gtid_state=self._gtid_state(cp),
        )
        try:
            # the topic's partition count, as the broker has it, then as meta recorded it
            topics.check_broker(delivery.producer, [self.topic], self.partitions)
            topics.claim(self.meta, self.zone, self.partitions, chain_partitions)
            stream = open_reader(self.rows, self.source, self.server_id, self.lease.holder, cp.log_file, cp.log_pos,
                                 expected_server_id=segment.server_id)  # fmt: skip
        except Exception:
            delivery.producer.flush(5)
            raise
        return s, stream

    def _follow_primary(self, cp: Checkpoint) -> segments.Segment:
        """Step 1, which server: the zone's newest capture segment names its primary
        (segments.py; `zonesync zones set-primary` adds one). The server answering there
        must be the segment's own: another one (a virtual IP moved to a promoted replica)
        is not read until the checkpoint is mapped onto it (faults.PrimaryChanged). The
        first pass records segment 0."""
        seg = segments.current(self.meta, self.zone)
        if seg is not None and seg.segment > 0 and (seg.host, seg.port) != (self.source.host, self.source.port):
            log.info("replicator %s: the zone's primary is %s (segment %d)", self.zone, seg.address, seg.segment)
            self.source.moved_to(seg.host, seg.port)
        found = self.source.server_id()
        if seg is None:
            return segments.first(self.meta, self.zone, self.source.host, self.source.port, found, cp.log_file,
                                  cp.log_pos, cp.gtid_pos)  # fmt: skip
        if found != seg.server_id:
            raise PrimaryChanged(self.zone, f"{self.source.host}:{self.source.port}", found, seg.server_id)
        if cp.segment != seg.segment:
            raise ReplicatorError(
                f"zone {self.zone}'s newest checkpoint was read on segment {cp.segment}, its primary is segment "
                f"{seg.segment}: the checkpoint was not mapped onto the new primary (zonesync zones set-primary)"
            )
        return seg

    def _gtid_state(self, cp: Checkpoint) -> dict | None:
        """The GTID state at the pass's start: the checkpoint's, or asked of the server for
        one saved before checkpoints carried it (None: unknown, and the pass's checkpoints
        then carry none: a failover must wait for a later one)."""
        if cp.gtid_pos is not None:
            return gtid.parse(cp.gtid_pos)
        try:
            return self.source.gtid_state_at(cp.log_file, cp.log_pos)
        except Exception as exc:  # noqa: BLE001 - (the stream's own open says what is wrong)
            log.warning("replicator %s: no GTID state at %s:%s: %s", self.zone, cp.log_file, cp.log_pos, exc)
            return None

    def _read(self, s: PassState, stream, deadline: float | None) -> bool:
        """vplayer's applyEvents: each event to the handler of its kind, then the periodic
        work; True when a handler or the tick ended the pass (it drained what it had)."""
        s.last_cp_time = s.last_request_poll = time.monotonic()
        for ev in stream:
            if self.stopping or (deadline and time.monotonic() > deadline):
                break
            kind = type(ev)
            handler = _HANDLERS.get(kind) or _handler_of(kind)
            done = handler(self, s, ev, stream.log_file)
            if done is _NEXT:
                continue
            if done is _ENDED or self._tick(s, stream, isinstance(ev, HeartbeatLogEvent)):
                return True
        return False

    def _end_pass(self, s: PassState) -> None:
        """The pass ends at the last commit read: its checkpoint noted, everything drained."""
        if s.boundary_dirty:
            s.delivery.note(s.pending, s.checkpoint())
        self._drain(s.pending)

    # -- vplayer's applyEvent: one short case per event kind ------------------------
    def _on_gtid(self, s: PassState, ev, log_file: str):
        """A transaction begins: buffered from here to its commit (step 2), skipped whole
        when an applier wrote it (step 3)."""
        seq = getattr(ev, "gtid_seq_no", None)  # (MariaDB's; the event has parsed them already)
        if seq is not None:
            s.gtid_read = (ev.domain_id, ev.server_id, seq)  # in the state once committed
        gtid_id = str(getattr(ev, "gtid", None) or f"{log_file}:{ev.packet.log_pos}")
        txn = s.txn = Txn(gtid_id, bool(ev.packet.flags & SKIP_REPLICATION_FLAG))
        if gtid_id in self._large_txns:
            txn.total, txn.commit_ts = self._large_txns[gtid_id]

    def _on_rows(self, s: PassState, ev, log_file: str):
        """A rows event: buffered in its transaction; counted only, once the transaction
        is too large to hold; queued at once when a large one is read again (step 2)."""
        txn = s.txn
        if txn is None:
            txn = s.txn = Txn(f"{log_file}:{ev.packet.log_pos}", False)
        if ev.packet.flags & SKIP_REPLICATION_FLAG or txn.skip:
            return _NEXT
        if ev.schema not in self.source.schemas:
            return _NEXT
        end_pos = ev.packet.log_pos
        op = INSERT if isinstance(ev, WriteRowsEvent) else UPDATE if isinstance(ev, UpdateRowsEvent) else DELETE
        images = self.rows.images(ev)
        pk_cols = self.source.primary_key(ev.schema, ev.table)
        rows_event = (ev.table, pk_cols, op, images, end_pos, getattr(ev, "plain", False))
        if txn.total is not None:  # a large transaction's second read: queued now
            s.queue(Txn(txn.txn_id, False, [rows_event], txn.total), log_file, txn.commit_ts, txn.rows)
        elif not txn.counting:
            txn.events.append(rows_event)
            if txn.rows + len(images) > self.large_txn_rows:
                txn.counting = True  # too large to hold: count it, read it again
                txn.events.clear()
            else:
                self.peak_buffered_rows = max(self.peak_buffered_rows, txn.rows + len(images))
        txn.rows += len(images)

    def _on_commit(self, s: PassState, ev, log_file: str):
        """Xid (or a COMMIT query): step 4 for the transaction read, its end a boundary."""
        txn = s.txn
        if txn is not None and txn.counting:
            # Counted, not queued: read it again with its size known. Nothing of it
            # was published, and the boundary stays at the commit before it.
            self._large_txns[txn.txn_id] = (txn.rows, int(ev.timestamp))
            log.info("replicator %s: transaction %s has %d rows: reading it again, streamed",
                     self.zone, txn.txn_id, txn.rows)  # fmt: skip
            self._end_pass(s)
            return _ENDED
        if txn is not None and txn.total is not None:
            if txn.rows != txn.total:
                raise ReplicatorError(f"transaction {txn.txn_id} read again has {txn.rows} rows, not {txn.total}")
            self._large_txns.pop(txn.txn_id, None)
            close_txn(s.pending)
        elif txn is not None and txn.events and not txn.skip:
            s.queue(txn, log_file, int(ev.timestamp))
            close_txn(s.pending)
        s.commit_read(log_file, ev.packet.log_pos)
        self.read_at = (log_file, ev.packet.log_pos, ev.timestamp)  # (capture lag: lag.py)

    def _on_query(self, s: PassState, ev, log_file: str):
        """A COMMIT query ends a transaction as an Xid does; a DDL is a boundary."""
        query = ev.query.strip().upper()
        if query == "COMMIT":
            return self._on_commit(s, ev, log_file)
        if s.txn is not None and not s.txn.rows and not query.startswith(IN_TRANSACTION):
            # A DDL is its own GTID group and ends with no Xid: nothing to publish
            # (DDL is not replicated), but the position after it is a boundary.
            self._on_ddl(ev, log_file)
            s.commit_read(log_file, ev.packet.log_pos)
        return None

    def _on_ddl(self, ev, log_file: str) -> None:
        """A DDL on a replicated table (capture/ddl.py): what was known of the table is
        forgotten, and the statement recorded in meta, once per position (meta down: only
        logged; the appliers' holds then name no statement)."""
        default = ev.schema.decode() if isinstance(ev.schema, bytes) else str(ev.schema or "")
        changed = ddl.table_changed(ev.query, default)
        if changed is None or changed[0] not in self.source.schemas:
            return
        schema, table = changed
        self.source.forget(schema, table)
        log.info("replicator %s: DDL on %s.%s at %s:%s: %s", self.zone, schema, table, log_file,
                 ev.packet.log_pos, " ".join(ev.query.split())[:300])  # fmt: skip
        change = schema_changes.SchemaChange(
            self.zone, log_file, ev.packet.log_pos, schema, table, ev.query,
            datetime.datetime.fromtimestamp(ev.timestamp, datetime.UTC).replace(tzinfo=None),
        )  # fmt: skip
        self.meta_outage.call(schema_changes.record, self.meta, change)

    def _on_other(self, s: PassState, ev, log_file: str):
        """Rotations and heartbeats: nothing to read in them; the tick does their work."""

    # -- the periodic work, after every event handled ------------------------------
    def _tick(self, s: PassState, stream, idle: bool) -> bool:
        """Flush, lease renewal, checkpoints, acks, pruning and resend polling; True when
        the pass ends here (a resend request arrived: a new pass rewinds for it)."""
        delivery = s.delivery
        if delivery.errors:
            delivery.check()
        now = time.monotonic()
        if now - self._renewed >= self.lease.ttl / 3 and self.meta_outage.call(self.lease.renew, default=False):
            self._renewed = now  # (LeaseLost goes through: another process took the zone over)
        if s.pending and (now - s.pending_since >= self.max_linger or (s.txn is None and not stream.data_ready())):
            # Queued events go out when the binlog has nothing more ready, checked
            # between transactions (after a published one, a skipped applier's one,
            # a DDL, a heartbeat), or once they waited max_linger whatever is read:
            # a transaction still being read is queued only at its commit, so
            # sending what is queued before it keeps each partition's order. (A large
            # transaction streamed is queued as it is read: each partition's last event
            # stays queued, as it may end the transaction there: close_txn.)
            delivery.flush(s.pending, keep_last=s.streaming)
        if idle:
            self._at_binlog_end(s, stream)
        if s.boundary_dirty and (idle or now - s.last_cp_time >= self.checkpoint_interval):
            # take a checkpoint at the last commit; it is saved once the broker acked it
            delivery.note(s.pending, s.checkpoint(), keep_last=s.streaming)
            s.boundary_dirty = False
            s.last_cp_time = now
        if delivery.in_flight and s.txn is None:  # (between transactions: not per event)
            delivery.producer.poll(0)
            self._save_acked()
        if s.resend_ids and s.hwm >= s.retry_until and not s.boundary_dirty:
            self._resend_served(s)
        if now - self._last_prune >= 60 and s.txn is None:
            self._last_prune = now
            self.meta_outage.call(self.store.prune)  # thin the history (older ones: one per minute)
        if now - s.last_request_poll >= self.resend_poll and s.txn is None:
            s.last_request_poll = now
            if self.meta_outage.call(resends.pending, self.meta, self.zone, default=[]):
                self._drain(s.pending)
                return True  # start a new pass that rewinds for the request
        return False

    def _at_binlog_end(self, s: PassState, stream) -> None:
        """A heartbeat: the server has nothing more to send."""
        if self.bootstrap() != s.bootstrap_used:
            raise ReplicatorError("the broker moved (new bootstrap): reconnecting")
        if s.txn is not None or not stream.log_pos:
            return
        last = s.boundary
        if last is None or (file_number(stream.log_file), stream.log_pos) > (file_number(last[0]), last[1]):
            # Idle at the end of the binlog: everything before the server's position
            # was read, even events that end no transaction (DDL, a binlog checkpoint).
            # Moving the checkpoint there lets wait_applied(P) succeed on a quiet zone.
            s.boundary = (stream.log_file, stream.log_pos)
            s.boundary_dirty = True
        self.read_at = (stream.log_file, stream.log_pos, None)  # at the binlog end

    def _resend_served(self, s: PassState) -> None:
        """Everything up to the old high-water mark was re-published: once the broker
        acked it, the resend is served."""
        s.delivery.flush(s.pending)
        if s.delivery.producer.flush(5) == 0 and not s.delivery.errors:
            self._save_acked()
            done = f"resent up to LSN {s.hwm}"
            if self.meta_outage.call(resends.finish, self.meta, s.resend_ids, "done", done, default=False):
                s.resend_ids = []
                s.retry_partitions = None

    def _save_acked(self) -> None:
        """Step 5: save the newest checkpoint the broker acked everything up to."""
        newest = self._delivery.acked_checkpoint()
        if newest is not None and not self.meta_outage.call(self.store.save, newest, default=False):
            self._delivery.retry_later(newest)

    def _drain(self, pending: dict) -> None:
        """End of a pass: produce what is queued, wait for every ack, save what they allow."""
        self._delivery.flush(pending)
        self._delivery.drain()
        self._save_acked()

    @property
    def published(self) -> int:
        """Events produced by this replicator, over all its passes."""
        return self._published_before + (self._delivery.published if self._delivery else 0)


_HANDLERS: dict[type, object] = {}  # event class -> Replicator._on_*, filled as classes are met


def _handler_of(kind: type):
    """The handler of an event class, as isinstance picks it (the lean stream's events
    are subclasses of the library's, binlog_stream.py)."""
    if issubclass(kind, MariadbGtidEvent | GtidEvent):
        handler = Replicator._on_gtid
    elif issubclass(kind, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
        handler = Replicator._on_rows
    elif issubclass(kind, XidEvent):
        handler = Replicator._on_commit
    elif issubclass(kind, QueryEvent):
        handler = Replicator._on_query
    else:
        handler = Replicator._on_other
    _HANDLERS[kind] = handler
    return handler
