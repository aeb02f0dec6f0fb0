"""The applier (PiDTS apply, Otter's load): other zones' topics -> this zone.

Protocol:

1. Position: zonesync.apply_state in the target zone, per (source zone,
   partition): the applied LSN and the Kafka offset it came from. Partitions
   are assigned at offset + 1 (the broker restarted empty: from its start);
   consumer-group offsets are never used. Halted partitions stay halted.
   One applier takes every partition; with `group` (Otter's node and manager,
   PiDTS's one worker per partition: seeds S002-20, S003-35 to S003-37) the
   zone's appliers share them through a Kafka consumer group, so several
   processes apply into one zone and a crashed one's partitions move to the
   live ones. A partition's position is read from apply_state when it is
   assigned, so the new owner starts from what was committed; before one is
   revoked every round in flight commits, so two workers never apply it at
   once; and one that was lost without a revoke (its worker hung past the
   session timeout) cannot commit over the new owner: each batch's position
   check fails once apply_state moved past where its chain starts.
2. Low-latency loop: block on poll() for the first message (returns at once
   when one arrives), then drain what is already fetched, up to about
   `max_batch` events (a message carries a partition's burst of events);
   never wait out a batch timeout while idle.
3. Continuity (continuity.py): per partition, skip what is applied, accept the
   successor chain (except a transaction's rows whose last row in the partition,
   txn_end, has not arrived: they wait for it and are applied together, seed
   S002-02; a message cut inside one is recorded as not yet read), and on a
   gap accept nothing more from that partition, ask the source's replicator
   for a resend (a row in meta), ask again after `resend_timeout`, and after
   `max_resends` halt the partition with an alert (seed: 停止复制 + 报警).
   A resend the replicator cannot serve halts at once.
4. Apply: the accepted chains of one round are applied on `workers`
   connections, partition p on worker p % workers, each worker's share as one
   transaction (writer.py): merged per key, version-guarded, data-locked, with
   every partition's position. Per-key order holds since a key has one
   partition number in every source and a partition one worker, and a
   worker takes its shares in the order they were handed to it. The loop does
   not wait for a round to commit before it reads and decodes the next one
   (at most `rounds_in_flight` rounds are handed out): the target's work on
   one round overlaps the applier's on the next. A worker whose share failed
   refuses every later share (a later round must never commit past a
   rolled-back one), and the pass restarts from apply_state once the workers
   are idle. A small round (a quiet stream: a few events) waits for the
   rounds in flight, then is one transaction on one connection: one commit,
   no hand-off to threads. With table weights, rounds do not overlap.
   A unique-key conflict that the writer's serial retry could not place
   (writer.py, "Unique keys") commits the rest and restarts the pass; while a
   partition stays stopped at such an event, every round is applied whole on
   one connection (both sides of a unique value's move in one serial
   transaction), and after `unique_conflict_timeout` seconds at the same event
   the partition halts with an alert: two rows hold the value for good.
   A change whose row's earlier versions have not arrived from another source
   (decide.py, "Waiting": ownership moved, and the new owner's update came
   first) stops its partition the same way, serially retried until they arrive;
   after `behind_timeout` seconds the row is locked instead (a data lock).
5. Lag per (source, partition) goes to meta every second; `zonesync lag`.
6. Copy mode: the tables an online full copy is filling in this zone (its
   zonesync.copy_tables) are read at each pass's start and once a second, and
   handed to every writer (`copying`): their changes are decided by version alone
   and written version-guarded (decide.py, "Copy mode"). A change of the list
   takes effect within about a second, without a restart.
7. Resident tables (the newest rules' `resident: true`; apply/batch/resident.py): their
   rows are applied only for the entities admitted in this zone (a migration moving
   them here), by version alone as in copy mode; everything else of theirs is skipped.
8. Held tables (apply/batch/table_holds.py, held_tables.py): a table whose definition
   here disagrees with its events is held with an alert naming the difference and the
   DDL behind it; its events are parked in the transactions that apply the rest, so
   every other table goes on. Holds are read at each pass's start and once a second;
   a resumed hold is drained in order, then dropped.

Any error (zone down, broker gone) drops the consumer and the connections and
starts again from step 1: what was committed is exactly what apply_state says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from zonesync.apply.batch.resident import resident_tables
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.errors import PartitionsStopped, SchemaMismatch, TableMissing
from zonesync.apply.loop.atomic_rounds import spans_workers, whole_transactions
from zonesync.apply.loop.continuity import complete_prefix, filter_chain
from zonesync.apply.loop.event_trust import EventTrust
from zonesync.apply.loop.held_tables import HeldTables
from zonesync.apply.loop.lag_report import LagReporter, message_time
from zonesync.apply.loop.owner_history import OwnerHistory
from zonesync.apply.loop.partition_faults import PartitionFaults
from zonesync.apply.loop.partitions import PartitionBook
from zonesync.apply.loop.rounds import Rounds
from zonesync.apply.loop.settings import ApplierSettings
from zonesync.events import ChangeEvent, EventError, decode_message
from zonesync.meta import alerts, topics
from zonesync.meta.db import META_DOWN, MetaConfig
from zonesync.meta.outage import MetaOutage
from zonesync.meta.store import MetaStore
from zonesync.runtime import transport

log = logging.getLogger("zonesync.applier")
TXN_HOLD_ROWS = 50_000  # the replicator's large_txn_rows: a larger transaction is streamed
ATOMIC_FETCH_BYTES = 64 * 1024


class Applier:
    """The loop (one pass after another) and what it owns: the partitions' book
    (partitions.py), shared with its collaborators, each given what it needs: `rounds`
    (rounds.py: a round applied on the workers), `lag` (lag_report.py) and `faults`
    (partition_faults.py: gaps, halts, stopped partitions, operators' instructions)."""

    def __init__(
        self,
        zone: str,
        sources: list[str],
        writer_factory,
        meta: MetaConfig,
        partitions: int,
        settings: ApplierSettings | None = None,
        bootstrap=transport.bootstrap,
        topic_of=transport.topic,
    ):
        self.zone = zone
        self.sources = sources
        self.writer_factory = writer_factory
        self.meta = meta
        self.partitions = partitions
        self.settings = settings = settings or ApplierSettings()
        self.bootstrap = bootstrap
        self.topic_of = topic_of
        self.book = book = PartitionBook()
        self._in_flight: deque = deque()  # (futures, shares) per round handed to the lanes, oldest first
        # a source transaction's rows become visible together, across partitions (atomic_rounds.py)
        self._txn_waiting: dict[tuple[str, str], float] = {}
        self._count_lock = threading.Lock()
        self._last_gc = 0.0
        self._source_of_topic = {topic_of(s): s for s in sources}
        # forged or foreign events (event_trust.py), owners by the rules' history (owner_history.py)
        self.owners = OwnerHistory(settings.max_version_ahead_s, self._read_rules) if settings.check_owners else None
        self.trust = EventTrust(settings.max_version_ahead_s, owners=self.owners)
        self._owners_warned = False
        self.stopping = False
        self.applied = 0
        self._local = threading.local()
        self._writers: list[ZoneWriter] = []
        self._writers_lock = threading.Lock()  # writers made on the lanes' threads, `copying` replaced
        self.copying: frozenset[str] = frozenset()  # decided by version alone: copy_tables + resident
        self.copy_tables: frozenset[str] = frozenset()  # tables in copy mode in this zone (step 6)
        self.resident: dict[str, tuple[str, str]] = {}  # the newest rules' resident tables (step 7)
        self.resident_known = False  # read from meta at least once (a pass applies nothing before)
        self.meta_outage = MetaOutage(f"applier {zone}", log)
        self._unsent_alerts: list[tuple[str, dict]] = []
        self._topics_confirmed = False  # meta confirmed the partition counts once
        self.rounds = Rounds(book, settings, self._writer, self._record)
        self.lag = LagReporter(book, settings, zone, topic_of, meta, self.meta_outage, self.alert)
        self.faults = PartitionFaults(
            book, settings, zone, topic_of, meta, self.meta_outage, self._writer, self.alert, self._record
        )
        self.held = HeldTables(zone, self._writer, meta, self.meta_outage, self.alert, self._record, self._hand_holds,
                               settings.drain_batch)  # fmt: skip

    # -- meta side -----------------------------------------------------------
    # Meta unreachable (seed S003-03): apply goes on. apply_state lives in the target zone,
    # with the rows; lag, resend requests and alerts wait for meta (alerts are kept and sent
    # once it answers), and the partition counts checked at a pass's start are the ones it
    # last confirmed.
    def alert(self, kind: str, detail: dict) -> None:
        if not self.meta_outage.call(alerts.record, self.meta, self.zone, kind, detail, default=False):
            self._unsent_alerts.append((kind, detail))

    def _send_alerts(self) -> None:
        while self._unsent_alerts and not self.meta_outage.down:
            kind, detail = self._unsent_alerts[0]
            if not self.meta_outage.call(alerts.record, self.meta, self.zone, kind, detail, default=False):
                return
            self._unsent_alerts.pop(0)

    def _record(self, result) -> None:
        """What a batch committed (any worker's thread): counted, its locked rows alerted."""
        with self._count_lock:
            self.applied += result.applied
        for source, table, pk, reason in result.locked:
            self.alert("row_locked", {"source": source, "table": table, "pk": pk, "reason": reason})

    def _read_rules(self) -> bool:
        """The rules versions published since the last read, for the owners' check: any?"""
        owners = self.owners
        if owners is None:
            return False
        store = MetaStore(self.meta)
        newer = self.meta_outage.call(store.rules_after, owners.last_version, default=None)
        if newer is not None:
            owners.add(newer)
            units = self.meta_outage.call(store.entity_units_after, owners.last_unit_version, default=None) or []
            owners.add_units(units)
            return bool(newer or units)
        if not owners.known and not self._owners_warned:
            self._owners_warned = True
            log.warning("applier %s: meta has not answered yet: events' owners are unchecked until it does", self.zone)
        return False

    # -- workers -------------------------------------------------------------
    def _writer(self) -> ZoneWriter:
        w = getattr(self._local, "writer", None)
        if w is None:
            w = self.writer_factory()
            w.expired_waits = self.book.expired_waits
            w.table_weights = self.settings.table_weights  # tables in weight order inside a transaction
            w.idle_transaction_s = self.settings.idle_transaction_s
            w.zone = self.zone
            self._local.writer = w
            with self._writers_lock:
                w.copying, w.resident.tables, w.holds.tables = self.copying, self.resident, self.held.tables
                self._writers.append(w)
        return w

    def _close_writers(self) -> None:
        with self._writers_lock:
            writers, self._writers = self._writers, []
        for w in writers:
            w.close()
        self._local = threading.local()

    def _read_copy_tables(self) -> None:
        """Step 6: the zone's tables in copy mode, handed to every writer when they changed
        (a whole new set: a batch never sees it half-way)."""
        tables = self._writer().copy_tables()
        if tables == self.copy_tables:
            return
        log.info("applier %s: tables in copy mode: %s", self.zone, sorted(tables) or "none")
        self.copy_tables = tables
        self._hand_tables()

    def _hand_holds(self, tables: frozenset[str], resumed: list[str]) -> None:
        """Step 8: every writer's held tables replaced whole; resumed ones' definitions forgotten."""
        with self._writers_lock:
            for w in self._writers:
                for table in resumed:
                    w.forget(table)
                w.holds.tables = tables

    def _read_resident(self) -> bool:
        """Step 7: the newest rules' resident tables, handed to every writer when they
        changed (resident.py: their rows applied only for the entities admitted here, by
        version alone). No rules published: none. Meta unreachable: the last ones read stay
        in force. False while this applier has never read them: its pass must not apply
        anything yet."""
        if self.owners is not None:
            known, rules = self.owners.known, self.owners.newest()
        else:
            found = self.meta_outage.call(MetaStore(self.meta).rules_at, default=False)
            # (the call says True for "no rules published", False for "meta unreachable")
            known, rules = found is not False, found[1] if isinstance(found, tuple) else None
        if not known:
            return self.resident_known
        self.resident_known = True
        tables = resident_tables(rules) if rules is not None else {}
        if tables != self.resident:
            log.info("applier %s: resident tables: %s", self.zone, sorted(tables) or "none")
            self.resident = tables
            self._hand_tables()
        return True

    def _wait_for_resident(self) -> None:
        """A pass's start: until this applier has read the resident tables once, nothing is
        applied (a resident row applied as an ordinary one would land in a unit it does not
        belong to). A pass that starts again while meta is down keeps the last ones read."""
        warned = False
        while not self.stopping and not self._read_resident():
            if not warned:
                warned = True
                log.warning("applier %s: meta has not told the resident tables yet: applying nothing until it "
                            "does", self.zone)  # fmt: skip
            time.sleep(1.0)
            self._read_rules()

    def _hand_tables(self) -> None:
        """Every writer's `copying` and resident tables replaced whole (a batch never sees
        half of a change)."""
        with self._writers_lock:
            self.copying = self.copy_tables | frozenset(self.resident)
            for w in self._writers:
                w.copying, w.resident.tables = self.copying, self.resident

    # -- the loop ------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> None:
        deadline = time.monotonic() + max_seconds if max_seconds else None
        while not self.stopping and (deadline is None or time.monotonic() < deadline):
            try:
                self._pass(deadline)
            except topics.PartitionCountMismatch:
                raise  # configuration: retrying cannot help
            except SchemaMismatch as exc:  # definitions disagree: those tables are held, the rest go on
                self._close_writers()
                self.held.hold(exc)
            except TableMissing as exc:  # retrying cannot help either: those partitions halt
                self._close_writers()
                self.faults.halt_table_missing(exc)
            except PartitionsStopped as exc:  # the rest committed: retried serially (partition_faults.py)
                self._close_writers()
                self.faults.partitions_stopped(exc)
            except Exception as exc:  # noqa: BLE001 - any failure: re-read state and start over
                if self.stopping:
                    break
                log.warning("applier %s: %s: restarting from apply_state", self.zone, exc)
                self._close_writers()
                time.sleep(0.5)
        self._close_writers()

    def stop(self) -> None:
        self.stopping = True

    @property
    def stopped(self) -> dict[tuple[str, int], int]:
        """(source zone, partition) -> the LSN it stands stopped before (serial retries)."""
        return {key: lsn for key, (lsn, _) in self.book.stops.items()}

    def _take_over(self, keys: list[tuple[str, int]]) -> list[TopicPartition]:
        """Step 1 for `keys`: their positions from apply_state; where to consume them from."""
        self._writer().ensure_positions(keys)
        recorded = self._writer().state()
        out = []
        for source, p in keys:
            lsn, offset, status = recorded.get((source, p), (0, -1, "running"))
            self.book.take((source, p), lsn, offset, halted=status == "halted")
            out.append(TopicPartition(self.topic_of(source), p, offset + 1 if offset >= 0 else OFFSET_BEGINNING))
        return out

    def _on_assign(self, consumer, partitions) -> None:
        """Group mode: partitions given to this applier, taken from their committed positions."""
        keys = [(self._source_of_topic[tp.topic], tp.partition) for tp in partitions]
        assignment = self._take_over(keys)
        consumer.assign(assignment)
        halted = [tp for tp, key in zip(assignment, keys, strict=True) if self.book.state[key].halted]
        if halted:
            consumer.pause(halted)
        log.info("applier %s: took partitions %s", self.zone, sorted(keys))

    def _on_revoke(self, consumer, partitions) -> None:
        """Group mode: partitions leaving this applier. Every round in flight commits first
        (S003-37: the next owner starts from a committed position, never beside us)."""
        self.rounds.reap(self._in_flight, keep=0)
        keys = [(self._source_of_topic[tp.topic], tp.partition) for tp in partitions]
        for key in keys:
            self.book.drop(key)
        consumer.unassign()
        log.info("applier %s: gave up partitions %s", self.zone, sorted(keys))

    # One pass: a consumer and the workers' lanes, from apply_state, until an error or a stop.
    # Like Vitess's vplayer: the loop in one function (_pass), one short step per concern
    # (take a round, accept its chains, hold or let through whole transactions, hand it out,
    # follow gaps), and tick() for the once-a-second work.
    def _pass(self, deadline: float | None) -> None:
        self.book.reset()
        self._read_copy_tables()
        self.held.read()
        self._read_rules()
        self._wait_for_resident()
        link = _Pass(self.bootstrap())
        link.consumer = self._open_consumer(link)
        # One single-threaded executor per worker: a worker applies its shares in order.
        link.lanes = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"apply-{self.zone}-{i}")
            for i in range(self.settings.workers)
        ]
        self._in_flight = link.in_flight
        try:
            while not self.stopping and (deadline is None or time.monotonic() < deadline):
                by_partition = self._take_round(link)
                self.rounds.reap(link.in_flight, keep=len(link.in_flight))  # rounds that committed meanwhile
                if link.down_since and time.monotonic() - link.down_since > 5:
                    raise RuntimeError("broker unreachable for 5 s: reconnecting with a fresh bootstrap")
                jobs, gaps = self._accept(by_partition)
                whole = False
                if jobs and self.settings.atomic_transactions:
                    jobs, whole = self._whole_source_transactions(jobs)
                # once a second, the ages of what is pending, taken before this round is
                # handed out, while its events are still pending (lag_report.py)
                pending = self.lag.pending_ages() if time.monotonic() - link.last_tick >= 1.0 else None
                if jobs:
                    self._hand_out(link, jobs, whole)
                self._follow_gaps(link.consumer, jobs, gaps)
                if pending is not None:
                    self.tick(link, pending)
            self.rounds.reap(link.in_flight, keep=0)
        finally:
            for lane in link.lanes:
                lane.shutdown(wait=True)
            link.consumer.close()

    def _open_consumer(self, link: _Pass) -> Consumer:
        """Step 1: a consumer on the sources' topics (their partition counts checked), given
        its partitions from apply_state, or subscribed to the zone's group."""

        def on_error(err):
            # Connection loss is reported here, not as messages: note when the brokers went away.
            if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
                link.down_since = link.down_since or time.monotonic()

        config = transport.consumer_config(link.bootstrap_used, f"zonesync-apply-{self.zone}")
        if self.settings.group:
            session_ms = int(self.settings.group_session_s * 1000)
            config.update({"session.timeout.ms": session_ms, "heartbeat.interval.ms": 500})
        if self.settings.atomic_transactions:
            # small slices of every partition per fetch: a transaction's rows, spread over the
            # partitions, arrive close together (atomic_rounds.py: what is held stays small)
            config["max.partition.fetch.bytes"] = ATOMIC_FETCH_BYTES
        consumer = Consumer({**config, "error_cb": on_error})
        try:
            # the topics' partition count, as the broker has it, then as meta recorded it
            topic_names = [self.topic_of(s) for s in self.sources]
            topics.check_broker(consumer, topic_names, self.partitions)
            try:
                topics.check(self.meta, self.sources, self.partitions)
                self._topics_confirmed = True
            except META_DOWN:
                if not self._topics_confirmed:
                    raise
            if self.settings.group:
                revoke = self._on_revoke
                consumer.subscribe(topic_names, on_assign=self._on_assign, on_revoke=revoke, on_lost=revoke)
            else:
                every = self._take_over([(s, p) for s in self.sources for p in range(self.partitions)])
                consumer.assign([tp for tp, st in zip(every, self.book.state.values(), strict=True) if not st.halted])
        except BaseException:
            # (a zone or meta unreachable: closed here, not left to the garbage collector, which
            # a kept traceback delays: a librdkafka instance and its threads per retry)
            consumer.close()
            raise
        return consumer

    def _take_round(self, link: _Pass) -> dict[tuple[str, int], list[tuple[ChangeEvent, int]]]:
        """Step 2: what is already fetched, up to the round's budget of events (a message holds
        one or many), decoded into its partitions' chains; messages fetched past the budget
        start the next round (`link.carry`)."""
        consumer, by_partition = link.consumer, {}
        msgs, link.carry = link.carry, []
        if not msgs:
            first = consumer.poll(0.05)
            msgs = [first] if first is not None else []
        events, delivered, budget = 0, False, self._round_budget()
        while msgs:
            n, got, link.carry = self._take(msgs, by_partition, consumer, budget - events)
            events, delivered = events + n, delivered or got
            if link.carry or events >= budget:
                break
            msgs = consumer.consume(num_messages=64, timeout=0)
        if delivered:
            link.down_since = None
        return by_partition

    def _accept(self, by_partition: dict) -> tuple[dict, dict]:
        """Step 3 per partition: (accepted chains, gaps), the rows held back from the last
        round first; a transaction's rows whose end has not arrived are held again."""
        jobs, gaps, book = {}, {}, self.book
        for key, held in book.held.items():  # a transaction's rows waiting for the rest
            by_partition[key] = held + by_partition.get(key, [])
        book.held = {}
        state = book.state
        for key, items in by_partition.items():
            filtered = filter_chain(state[key].applied_lsn, items)
            accepted = self._whole_transactions(key, filtered.accepted) if filtered.accepted else None
            if accepted:
                jobs[key] = accepted
            if filtered.gap:
                gaps[key] = filtered.gap
        return jobs, gaps

    def _whole_source_transactions(self, jobs: dict) -> tuple[dict, bool]:
        """atomic_transactions (atomic_rounds.py): the round's whole source transactions, the
        rest held; and whether the round must be one target transaction."""
        jobs, held = whole_transactions(
            jobs, self._txn_waiting, time.monotonic(), self.settings.txn_hold_timeout, TXN_HOLD_ROWS, TXN_HOLD_ROWS
        )
        kept = self.book.held
        for key, events in held.items():
            kept[key] = events + kept.get(key, [])
        return jobs, bool(self.settings.table_weights) or spans_workers(jobs, self.settings.workers)

    def _hand_out(self, link: _Pass, jobs: dict, whole: bool) -> None:
        """Step 4: one transaction per worker. Partition p always goes to worker p % workers,
        so a key (one partition number in every source) is applied by one worker."""
        rounds: dict[int, list] = {}
        workers = self.settings.workers
        for key, chain in jobs.items():
            rounds.setdefault(key[1] % workers, []).append((key, chain))
        self.rounds.run(link.lanes, link.in_flight, link.failed, rounds, whole)

    def _follow_gaps(self, consumer, jobs: dict, gaps: dict) -> None:
        """Step 3's gaps: progress closes a partition's earlier gap; new gaps, and old ones
        still open, ask for resends (partition_faults.py)."""
        state, on_gap = self.book.state, self.faults.on_gap
        for key in jobs:
            st = state[key]
            st.gap_since, st.resend_attempts, st.request_id = None, 0, None
        for key, st in state.items():
            if not st.halted and (key in gaps or st.gap_since is not None):
                on_gap(consumer, key, gaps.get(key))

    def tick(self, link: _Pass, pending: dict[tuple[str, int], float]) -> None:
        """Once a second: the broker still where it was, operators' halts and resumes, the
        tables in copy mode, lag (with the ages taken before the round), alerts kept while
        meta was down, and once a minute the tombstones past the horizon."""
        now = link.last_tick = time.monotonic()
        if self.bootstrap() != link.bootstrap_used:
            raise RuntimeError("the broker moved (new bootstrap): reconnecting")
        self.faults.check_status()
        self._read_copy_tables()
        self._read_rules()
        self._read_resident()
        self.held.read()
        if self.held.status:
            self.held.drain()
        self.lag.report(link.consumer, pending)
        self._send_alerts()
        if now - self._last_gc >= 60:
            self._last_gc = now
            self._writer().gc_tombstones(self.settings.tombstone_horizon_s)

    def _round_budget(self) -> int:
        """New events a round takes: max_batch; in atomic mode as many as are held, too (up
        to TXN_HOLD_ROWS in all). Held events are weighed again with every round, so a round
        of max_batch new events behind 40k held ones spent most of its time re-reading them
        (session 12: 0.2x native); taking as many new ones as are held keeps that work at
        most twice the events taken."""
        held = self.book.held
        if not self.settings.atomic_transactions or not held:
            return self.settings.max_batch
        rows = sum(len(events) for events in held.values())
        return max(self.settings.max_batch, min(rows, TXN_HOLD_ROWS - rows))

    def _whole_transactions(self, key, chain: list) -> list:
        """Step 3's S002-02: the chain up to the last event that ends its transaction in the
        partition; the rest waits (the book's `held`) for the event that ends it, read in a
        later round. Cut inside a message, the applied part records the message before as read,
        so a restart reads that message again. Rows whose transaction end does not come
        (events of a replicator from before txn_end) go after `txn_hold_timeout`, and so
        do the rows of a transaction too large to hold (a mass update, streamed: more than
        TXN_HOLD_ROWS of its rows in one partition), which is then applied in parts."""
        done, rest = complete_prefix(chain)
        held_since = self.book.held_since
        if not rest:
            held_since.pop(key, None)
            return chain
        now = time.monotonic()
        since = held_since.get(key, now) if not done else now
        if now - since >= self.settings.txn_hold_timeout or len(rest) > TXN_HOLD_ROWS:
            log.warning("applier %s: %s: a transaction's end did not arrive: applying its rows", self.zone, key)
            held_since.pop(key, None)
            return chain
        held_since[key] = since
        self.book.held[key] = rest
        if done and rest[0][1] == done[-1][1]:
            done[-1] = (done[-1][0], done[-1][1] - 1)
        return done

    def _take(self, msgs, by_partition: dict, consumer, budget: int) -> tuple[int, bool, list]:
        """Decode messages into their partitions' chains until `budget` events are taken:
        (events taken, any delivered, the messages left).

        Each event keeps the offset of the message it came in: a round applies whole
        messages (a gap inside one stops the chain there, and what follows comes again
        with the resend), so apply_state's offset + 1 is where the next message starts.
        """
        book = self.book
        decode, source_of, state, backlogs = decode_message, self._source_of_topic, book.state, book.backlog
        per_message = book.per_message
        events, delivered = 0, False
        for i, msg in enumerate(msgs):
            if events >= budget:
                return events, delivered, msgs[i:]
            if msg.error():
                continue
            delivered = True
            key = (source_of[msg.topic()], msg.partition())
            st = state.get(key)
            if st is None or st.halted:
                continue
            offset = msg.offset()
            try:
                batch = decode(msg.value())
                self.trust.check(batch, *key)
            except EventError as exc:
                self.faults.halt(consumer, key, f"malformed message at offset {offset}: {exc}")
                continue
            backlog = backlogs.get(key)
            if backlog is not None:  # its timestamp, for seconds behind (lag_report.py)
                backlog.on_read(offset, batch[-1].lsn, message_time(msg, batch[0]))
            if batch[0].is_retry or batch[-1].is_retry:
                st.retry_seen = time.monotonic()  # a resend is arriving (partition_faults.on_gap)
            chain = by_partition.get(key)
            if chain is None:
                chain = by_partition[key] = []
            chain += [(event, offset) for event in batch]
            events += len(batch)
            per_message[key] = len(batch)
        return events, delivered, []


class _Pass:
    """What one pass of the loop holds: the broker link, the workers' lanes and the rounds
    handed to them, and the loop's own bookkeeping between rounds."""

    __slots__ = ("bootstrap_used", "carry", "consumer", "down_since", "failed", "in_flight", "lanes", "last_tick")

    def __init__(self, bootstrap_used):
        self.bootstrap_used = bootstrap_used
        self.consumer = None
        self.lanes: list[ThreadPoolExecutor] = []
        self.in_flight: deque[tuple[list[Future], list]] = deque()  # (futures, shares) per round, oldest first
        self.failed = threading.Event()  # set by a failed share: the workers take no later one
        self.down_since: float | None = None  # when the brokers went away (error_cb)
        self.last_tick = 0.0
        self.carry: list = []  # messages fetched, not yet taken into a round
