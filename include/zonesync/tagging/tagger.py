"""The tagger of a zone: every zone's change topic -> the zone's tag store (seed 004 §3.2.3).

Every zone holds every row (full mesh), so the tagger of zone Z follows every zone's
topic, its own included, and keeps Z's tag store whole: a migration that starts in Z
finds there every row of an entity, wherever it was written.

The protocol, as the applier's (apply/loop/applier.py), with the state kept beside the
data it describes:

1. Open: a consumer assigned every partition of every source topic, each from the
   offset after the one `zonesync.tag_state` records (the start of the topic when none).
   Resume is this step again: nothing else is remembered between passes.
2. Take a batch of messages (until they hold `batch` events, or what arrived within
   `wait_s`), decode each with the decoder made for the tag rules in force, and group
   their tag entries by entity (pure: extract.py). Big batches are what make the store
   fast: a batch costs a row per entity it touched, so the more of an entity's rows one
   batch holds, the fewer rows per tag.
3. Append the batch's segments, each partition's new position and the batch number in
   one zone transaction, on a writer thread, in the order the batches were taken, while
   step 2 takes the next (_Writer). A crash before a commit loses nothing (the batch is
   read again); after it, nothing is read twice; a replay from older offsets (the state
   lost, say) appends entries the fold already has. When the tagger is not behind (the
   batch did not fill), up to COMPACT_PER_BATCH entities this pass has appended to
   COMPACT_AT times are compacted in the same transaction (tag_store.py).
4. Once a second: the tag rules read again from meta (a new version applies to events
   from then on; rows written before a rule existed are the backfill's).

A message no decoder accepts is not tagged and is alerted (`tag_refused`), never silently
dropped; tagging goes on. Any other error (zone or broker down) ends the pass; the next
one starts from step 1.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from zonesync.events import EventError
from zonesync.meta.db import MetaConfig
from zonesync.runtime import transport
from zonesync.tagging.extract import Extractor, TagBatch
from zonesync.tagging.follow import RulesFollower
from zonesync.tagging.rules import TagRules
from zonesync.tagging.tag_store import TagStore

log = logging.getLogger("zonesync.tagger")
COMPACT_AT = 16  # segments appended to an entity's table before the tagger compacts it
COMPACT_PER_BATCH = 200  # entities compacted with one batch, when the tagger is not behind
FIRST_BATCH = 5_000  # events of a pass's first batch; each full batch doubles it, up to `batch`
SWITCH_INTERVAL_S = 0.0005  # the process's GIL switch interval while a tagger runs (run())
MAX_TRACKED = 1_000_000  # entities whose appends a pass counts (past it the counts restart)


class Tagger:
    def __init__(self, zone: str, sources: list[str], connect, repo: str, meta: MetaConfig, partitions: int,
                 bootstrap=transport.bootstrap, topic_of=transport.topic, batch: int = 50_000,
                 wait_s: float = 0.05, compact_at: int = COMPACT_AT):  # fmt: skip
        self.zone, self.sources, self.partitions = zone, sources, partitions
        self.connect, self.store = connect, TagStore(connect, repo)
        self.repo, self.meta = repo, meta
        self.bootstrap, self.topic_of = bootstrap, topic_of
        self.batch, self.wait_s, self.compact_at = batch, wait_s, compact_at
        self.rules = TagRules()
        self.rules_version = 0
        self.extractor = Extractor(self.rules, repo)
        self.appended: dict[tuple, int] = {}  # (entity type, id, table) -> segments since compacted
        self.due: set[tuple] = set()  # of those, appended to COMPACT_AT times
        self._source_of: dict = {}
        self._lsns: dict = {}
        self._limit = FIRST_BATCH
        self._announce = False
        self.follower = RulesFollower(meta, zone, f"tagger {zone}", log)
        self.stopping = False
        self.tagged = 0  # tag changes committed
        self.untaggable = 0

    def stop(self) -> None:
        self.stopping = True

    def run(self, max_seconds: float | None = None) -> None:
        # The writer thread takes the GIL a dozen times a batch (each socket call gives it
        # back); a thread waiting for it waits the switch interval (5 ms by default) before
        # asking the loop, which runs C for most of that time, to let go: 0.5 ms while the
        # tagger runs (the setting is the process's: given back when it stops).
        before = sys.getswitchinterval()
        sys.setswitchinterval(min(before, SWITCH_INTERVAL_S))
        try:
            deadline = None if max_seconds is None else time.monotonic() + max_seconds
            while not self.stopping and (deadline is None or time.monotonic() < deadline):
                try:
                    self._pass(deadline)
                except Exception as exc:  # noqa: BLE001 - any failure: a fresh pass from tag_state
                    log.warning("tagger %s: pass ended (%s): starting again from tag_state", self.zone, exc)
                    time.sleep(0.5)
        finally:
            sys.setswitchinterval(before)

    # -- step 1 ---------------------------------------------------------------
    def _open(self, positions: dict) -> Consumer:
        """A consumer on every source partition, each from after the offset tag_state holds."""
        consumer = Consumer(transport.consumer_config(self.bootstrap(), f"zonesync-tag-{self.zone}"))
        for source in self.sources:  # the partitions' leaders known before assign: librdkafka otherwise
            consumer.list_topics(self.topic_of(source), timeout=10)  # asks for offsets too early, retries in 0.5 s
        consumer.assign([
            TopicPartition(self.topic_of(s), p, positions[(s, p)][1] + 1 if (s, p) in positions else OFFSET_BEGINNING)
            for s in self.sources for p in range(self.partitions)
        ])  # fmt: skip
        return consumer

    def _pass(self, deadline: float | None) -> None:
        self._read_rules(force=True)
        state = self.store.positions()
        consumer = self._open(state)
        writer = _Writer(self.store, self.connect, self.store.last_batch())  # step 3 runs beside steps 2 and 4
        self._source_of = {self.topic_of(s): s for s in self.sources}
        self._lsns = {key: lsn for key, (lsn, _) in state.items()}
        self.appended, self.due = {}, set()
        self._limit = FIRST_BATCH  # batches grow to `batch`: the writer starts early, then keeps pace
        try:
            while not self.stopping and (deadline is None or time.monotonic() < deadline):
                batch, positions, behind = self._take(consumer)  # step 2
                segments = batch.segments()
                self._count(segments)
                compact = [] if behind else self._to_compact()
                if positions or compact or self._announce:  # (a new rules version: written even when idle)
                    writer.put(segments, positions, compact, self.rules_version)
                    self._announce = False
                    self.tagged += batch.entries
                    self.untaggable += batch.untaggable
                self._read_rules()  # step 4
            writer.drain()
        finally:
            writer.close()
            consumer.close()

    def _take(self, consumer: Consumer) -> tuple[TagBatch, dict, bool]:
        """A batch of about `batch` events, or what arrived within `wait_s` (once the
        messages waiting are read), as tag entries; the partitions' new positions; whether
        more messages were waiting (behind). Only an empty batch waits for messages: one
        that has some takes what the consumer holds and goes (librdkafka's consume waits
        for its whole count otherwise)."""
        batch, positions = TagBatch(self.extractor), {}
        ends = time.monotonic() + self.wait_s
        while True:
            wait = max(0.0, ends - time.monotonic()) if not positions else 0.0
            msgs = consumer.consume(500, timeout=wait)
            for msg in msgs:
                if msg.error():
                    continue
                key = (self._source_of[msg.topic()], msg.partition())
                try:
                    events = self.extractor.events(msg.value())
                except EventError as exc:
                    self._alert("tag_refused", {"source": key[0], "partition": key[1], "offset": msg.offset(),
                                                "detail": str(exc)})  # fmt: skip
                    positions[key] = (self._lsns.get(key, 0), msg.offset())
                    continue
                batch.add(events)
                self._lsns[key] = events[-1].lsn
                positions[key] = (self._lsns[key], msg.offset())
            if batch.events >= min(self.batch, self._limit):
                self._limit *= 2
                return batch, positions, True
            if not msgs and (positions or time.monotonic() >= ends):  # all there was: not behind
                return batch, positions, False

    def _count(self, segments: list) -> None:
        appended, due = self.appended, self.due
        if len(appended) > MAX_TRACKED:  # a pass over more entities than that: start counting again
            appended.clear()
            due.clear()
        for key, _ in segments:
            n = appended[key] = appended.get(key, 0) + 1
            if n == self.compact_at:
                due.add(key)

    def _to_compact(self) -> list[tuple]:
        """Up to COMPACT_PER_BATCH entities appended to COMPACT_AT times since compacted."""
        picked = []
        while self.due and len(picked) < COMPACT_PER_BATCH:
            key = self.due.pop()
            self.appended[key] = 0
            picked.append(key)
        return picked

    # -- step 4 ---------------------------------------------------------------
    def _read_rules(self, force: bool = False) -> None:
        found = self.follower.newer(force)
        if found is not None:
            self.rules_version, self.rules = found
            self.extractor = Extractor(self.rules, self.repo)
            self._announce = True  # the store says which version the tagger tags by (a backfill waits for it)

    def _alert(self, kind: str, detail: dict) -> None:
        self.follower.alert(kind, detail)


class _Writer:
    """Step 3 on a thread of its own: batches are written in the order they were taken,
    one transaction each, numbered on from the store's last batch, while the loop decodes
    the next (at most two waiting). A failed write fails the pass at its next put (the
    batches after it are not written: the next pass reads them again from tag_state)."""

    def __init__(self, store: TagStore, connect, last_batch: int):
        self.store, self.connect, self.batch_no = store, connect, last_batch
        self.queue: queue.Queue = queue.Queue(maxsize=2)
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="tagger-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn = None
        try:
            conn = self.connect()
            conn.autocommit(False)  # a batch's segments and positions: one transaction (tag_store.load_connection)
            while (item := self.queue.get()) is not None:
                self.store.write(conn, item[0], item[1], self.batch_no + 1, item[2], item[3])
                self.batch_no += 1
        except BaseException as exc:  # noqa: BLE001 - reported to the loop, which ends the pass
            self.failed = exc
            while self.queue.get() is not None:  # let the loop's puts through until close()
                pass
        finally:
            if conn is not None:
                conn.close()

    def put(self, segments, positions, compact, rules_version: int) -> None:
        if self.failed is not None:
            raise self.failed
        self.queue.put((segments, positions, compact, rules_version))

    def drain(self) -> None:
        """Every batch put so far written (a clean stop)."""
        self.queue.put(None)
        self.thread.join()
        if self.failed is not None:
            raise self.failed

    def close(self) -> None:
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join(30)


def topic_ends(bootstrap: str, topic_of, sources: list[str], partitions: int, timeout: float = 10.0) -> dict:
    """(source, partition) -> the offset of its last message now (-1: empty): what "tagged up
    to now" means for TagStore.caught_up."""
    consumer = Consumer(transport.consumer_config(bootstrap, "zonesync-tag-ends"))
    try:
        ends = {}
        for s in sources:
            for p in range(partitions):
                _, high = consumer.get_watermark_offsets(TopicPartition(topic_of(s), p), timeout=timeout)
                ends[(s, p)] = high - 1
        return ends
    finally:
        consumer.close()
