"""The tagger of a zone: every zone's change topic -> the zone's tag store (seed 004 §3.2.3).

Every zone holds every row (full mesh), so the tagger of zone Z follows every zone's
topic, its own included, and keeps Z's tag store whole: a migration that starts in Z
finds there every row of an entity, wherever it was written.

The protocol, as the applier's (apply/loop/applier.py), with the state kept beside the
data it describes:

1. Open: a consumer assigned every partition of every source topic, each from the
   offset after the one `zonesync.tag_state` records (the start of the topic when none).
   Resume is this step again: nothing else is remembered between passes.
2. Take a batch of messages (at most `batch` events, or what arrived within `wait_s`),
   decode them, and turn them into tag changes by the tag rules in force (pure:
   tag_store.changes_of).
3. Write the changes and each partition's new position in one zone transaction, on a
   writer thread, in the order the batches were taken, while step 2 takes the next
   (_Writer). A crash before a commit loses nothing (the batch is read again); after it,
   nothing is read twice; a replay from older offsets (the state lost, say) rewrites
   the same tags, since each change applies only if not older than the tag.
4. Once a second: the tag rules read again from meta (a new version applies to events
   from then on; rows written before a rule existed are the backfill's).

A message no decoder accepts is not tagged and is alerted (`tag_refused`), never silently
dropped; tagging goes on. Any other error (zone or broker down) ends the pass; the next
one starts from step 1.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from zonesync.events import EventError, decode_message
from zonesync.meta import alerts
from zonesync.meta.db import MetaConfig
from zonesync.meta.outage import MetaOutage
from zonesync.meta.store import MetaStore
from zonesync.runtime import transport
from zonesync.tagging.rules import TagRules
from zonesync.tagging.tag_store import TagStore, changes_of, newest

log = logging.getLogger("zonesync.tagger")


class Tagger:
    def __init__(self, zone: str, sources: list[str], connect, repo: str, meta: MetaConfig, partitions: int,
                 bootstrap=transport.bootstrap, topic_of=transport.topic, batch: int = 5000,
                 wait_s: float = 0.05):  # fmt: skip
        self.zone, self.sources, self.partitions = zone, sources, partitions
        self.connect, self.store = connect, TagStore(connect, repo)
        self.repo, self.meta = repo, meta
        self.bootstrap, self.topic_of = bootstrap, topic_of
        self.batch, self.wait_s = batch, wait_s
        self.rules = TagRules()
        self.rules_version = 0
        self.meta_outage = MetaOutage(f"tagger {zone}", log)
        self.stopping = False
        self.tagged = 0  # tag changes committed
        self.untaggable = 0
        self._last_rules = 0.0

    def stop(self) -> None:
        self.stopping = True

    def run(self, max_seconds: float | None = None) -> None:
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while not self.stopping and (deadline is None or time.monotonic() < deadline):
            try:
                self._pass(deadline)
            except Exception as exc:  # noqa: BLE001 - any failure: a fresh pass from tag_state
                log.warning("tagger %s: pass ended (%s): starting again from tag_state", self.zone, exc)
                time.sleep(0.5)

    # -- step 1 ---------------------------------------------------------------
    def _open(self, positions: dict) -> Consumer:
        """A consumer on every source partition, each from after the offset tag_state holds."""
        consumer = Consumer(transport.consumer_config(self.bootstrap(), f"zonesync-tag-{self.zone}"))
        consumer.assign([
            TopicPartition(self.topic_of(s), p, positions[(s, p)][1] + 1 if (s, p) in positions else OFFSET_BEGINNING)
            for s in self.sources for p in range(self.partitions)
        ])  # fmt: skip
        return consumer

    def _pass(self, deadline: float | None) -> None:
        self._read_rules(force=True)
        state = self.store.positions()
        consumer = self._open(state)
        writer = _Writer(self.store, self.connect)  # step 3 runs beside steps 2 and 4
        source_of = {self.topic_of(s): s for s in self.sources}
        lsns = {key: lsn for key, (lsn, _) in state.items()}
        try:
            while not self.stopping and (deadline is None or time.monotonic() < deadline):
                msgs = consumer.consume(self.batch // 50 or 1, timeout=self.wait_s)  # step 2
                events, positions = [], {}
                for msg in msgs:
                    if msg.error():
                        continue
                    key = (source_of[msg.topic()], msg.partition())
                    try:
                        batch = decode_message(msg.value())
                    except EventError as exc:
                        self._alert("tag_refused", {"source": key[0], "partition": key[1], "offset": msg.offset(),
                                                    "detail": str(exc)})  # fmt: skip
                        positions[key] = (lsns.get(key, 0), msg.offset())
                        continue
                    events += batch
                    lsns[key] = batch[-1].lsn
                    positions[key] = (lsns[key], msg.offset())
                if positions:
                    changes, untaggable = changes_of(events, self.rules, self.repo)
                    writer.put(newest(changes), positions)
                    self.tagged += len(changes)
                    self.untaggable += untaggable
                self._read_rules()  # step 4
            writer.drain()
        finally:
            writer.close()
            consumer.close()

    # -- step 4 ---------------------------------------------------------------
    def _read_rules(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_rules < 1.0:
            return
        self._last_rules = now
        found = self.meta_outage.call(MetaStore(self.meta).tags_at, default=False)
        if found is False or found is True:  # meta down (kept what it had) / no tag rules yet
            return
        version, rules = found
        if version != self.rules_version:
            log.info("tagger %s: tag rules version %s (%d tables, %d KV patterns)", self.zone, version,
                     len(rules.mysql), len(rules.kv))  # fmt: skip
            self.rules, self.rules_version = rules, version

    def _alert(self, kind: str, detail: dict) -> None:
        log.error("tagger %s: %s %s", self.zone, kind, detail)
        self.meta_outage.call(alerts.record, self.meta, self.zone, kind, detail, default=False)


class _Writer:
    """Step 3 on a thread of its own: batches are written in the order they were taken,
    one transaction each, while the loop decodes the next (at most two waiting). A failed
    write fails the pass at its next put (the batches after it are not written: the next
    pass reads them again from tag_state)."""

    def __init__(self, store: TagStore, connect):
        self.store, self.connect = store, connect
        self.queue: queue.Queue = queue.Queue(maxsize=2)
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="tagger-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn = None
        try:
            conn = self.connect()
            conn.autocommit(False)  # a batch's tags and positions: one transaction (tag_store.load_connection)
            while (item := self.queue.get()) is not None:
                self.store.write(conn, *item)
        except BaseException as exc:  # noqa: BLE001 - reported to the loop, which ends the pass
            self.failed = exc
            while self.queue.get() is not None:  # let the loop's puts through until close()
                pass
        finally:
            if conn is not None:
                conn.close()

    def put(self, changes, positions) -> None:
        if self.failed is not None:
            raise self.failed
        self.queue.put((changes, positions))

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
