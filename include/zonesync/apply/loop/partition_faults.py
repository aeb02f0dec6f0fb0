"""What happens to one partition when its chain cannot go on (applier.py, steps 3 and 4).

A gap asks the source's replicator for a resend and halts the partition when resends
do not repair it; a table the target lacks halts the partitions that carried it; a
unique-key conflict serial order cannot place halts its partition after a while; a
change that waits for its row's earlier versions (another source's, not yet arrived)
stops its partition until they come, or locks the row after a while; and a halted
partition set running again (`zonesync resume`) is taken back. In each case only
that partition stops, with an alert, and every other one goes on.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import TopicPartition

from zonesync.apply.errors import BEHIND, PartitionsStopped, TableMissing
from zonesync.apply.loop.partitions import PartitionBook
from zonesync.apply.loop.settings import ApplierSettings
from zonesync.meta.db import MetaConfig
from zonesync.meta.outage import MetaOutage

log = logging.getLogger("zonesync.applier")


class PartitionFaults:
    """The fault paths per partition: given the partitions' book, the settings, the zone,
    how a source's topic is named, meta and its outage, the calling thread's writer
    (`writer()`: halts, apply_state), the alert function, and what to do with a
    stopped batch's result (`record(result)`: count its changes, alert its locked rows)."""

    def __init__(
        self,
        book: PartitionBook,
        settings: ApplierSettings,
        zone: str,
        topic_of,
        meta: MetaConfig,
        meta_outage: MetaOutage,
        writer,
        alert,
        record,
    ):
        self.book = book
        self.settings = settings
        self.zone = zone
        self.topic_of = topic_of
        self.meta = meta
        self.meta_outage = meta_outage
        self.writer = writer
        self.alert = alert
        self.record = record

    def _request_resend(self, source: str, partition: int, from_lsn: int) -> int:
        _, request_id = self.meta.run(
            "INSERT INTO resend_requests (source_zone, target_zone, partition_no, from_lsn) VALUES (%s, %s, %s, %s)",
            (source, self.zone, partition, from_lsn),
        )
        return request_id

    def _request_status(self, request_id: int) -> tuple[str, str]:
        rows, _ = self.meta.run("SELECT status, detail FROM resend_requests WHERE id = %s", (request_id,))
        return (rows[0][0], rows[0][1]) if rows else ("failed", "request vanished")

    def on_gap(self, consumer, key, gap) -> None:
        """Ask for a resend; count a resend as failed only once the replicator served it.

        A request still pending (the replicator is down or busy) is waited for, not
        counted: only resends that were served and still left the gap open, or that
        the replicator refused, lead to a halt.
        """
        source, partition = key
        st = self.book.state[key]
        now = time.monotonic()
        if st.gap_since is None:
            st.gap_since = now
            log.warning(
                "applier %s: gap in %s/%s after LSN %s (got prev_lsn %s): asking for a resend",
                self.zone,
                source,
                partition,
                st.applied_lsn,
                gap[1] if gap else "?",
            )
        if st.request_id is None:
            st.request_id = self.meta_outage.call(self._request_resend, source, partition, st.applied_lsn)
            if st.request_id is None:
                return  # meta is down: asked again at the next round
            st.resend_attempts = 1
            st.last_request = st.requested_at = now
            return
        if now - st.last_request < self.settings.resend_timeout:
            return
        status, detail = self.meta_outage.call(self._request_status, st.request_id, default=("pending", ""))
        if status == "failed":
            self.halt(consumer, key, f"resend from LSN {st.applied_lsn} impossible: {detail}")
        elif status == "done":
            # The resent events come after whatever the applier still has to read first (a
            # long retained tail, a mirror's lag): the resend failed only if they arrived and
            # the gap is still open, or if none arrived within resend_wait.
            arrived = st.retry_seen >= st.requested_at
            if (arrived and now - st.retry_seen < self.settings.resend_timeout) or (
                not arrived and now - st.requested_at < self.settings.resend_wait
            ):
                st.last_request = now
                return
            if st.resend_attempts >= self.settings.max_resends:
                tries = self.settings.max_resends
                self.halt(consumer, key, f"gap after LSN {st.applied_lsn} not repaired by {tries} resends")
                return
            request_id = self.meta_outage.call(self._request_resend, source, partition, st.applied_lsn)
            if request_id is not None:
                st.request_id = request_id
                st.resend_attempts += 1
                st.last_request = st.requested_at = now
        else:
            st.last_request = now  # still pending: keep waiting

    def halt(self, consumer, key, detail: str) -> None:
        source, partition = key
        st = self.book.state[key]
        st.halted = True
        self.book.held.pop(key, None)
        consumer.pause([TopicPartition(self.topic_of(source), partition)])
        # (the committed position: st.applied_lsn counts rounds handed out, which now fail their claim)
        applied = self.writer().halt(source, partition, detail)
        self.alert(
            "partition_halted",
            {"source": source, "partition": partition, "applied_lsn": applied, "detail": detail},
        )

    def check_status(self) -> None:
        """Operators' instructions, read once a second (seed S003-33): a partition halted here
        and set running again (`zonesync resume`), or one running here and halted (`zonesync
        halt`, ROLLBACK; `zonesync restart` is a halt, then a resume): start the pass over,
        which takes each partition from apply_state as it now stands (a halted one paused;
        rounds in flight for it fail their claim, so nothing of them lands).

        Also a running partition moved back while it stood idle: a full copy's start
        (copy/positions.py install) halts it and sets it running at an earlier position in
        two transactions, which can both fall between two looks. A round of it would fail
        its claim (StalePosition) and restart the pass, but an idle partition has no round:
        its events from the earlier position would never be read again. Commits only move a
        partition forward, so a recorded LSN below the last one this pass saw commit (taken
        before the read: a commit landing meanwhile only raises the recorded one) is a move."""
        committed = {key: backlog.applied_lsn for key, backlog in self.book.backlog.items()}
        recorded, state = self.writer().state(), self.book.state
        changed = [
            key for key, st in state.items() if st.halted != (recorded.get(key, (0, -1, "running"))[2] == "halted")
        ]
        if changed:
            raise RuntimeError(f"partitions {changed} were halted or resumed: taking them from apply_state")
        moved = sorted(key for key, lsn in committed.items() if key in recorded and recorded[key][0] < lsn)
        if moved:
            raise RuntimeError(f"partitions {moved} were moved back: taking them from apply_state")

    def halt_table_missing(self, exc: TableMissing) -> None:
        """Halt every partition whose events need the missing table (its batch rolled back,
        nothing of it applied); the next pass leaves them out and the others go on."""
        if not exc.keys:
            log.warning("applier %s: %s: restarting from apply_state", self.zone, exc)
            time.sleep(0.5)
            return
        writer = self.writer()
        for source, partition in sorted(exc.keys):
            detail = (
                f"table {exc.table} is missing in the target or has no primary key: create it, then "
                f"`zonesync resume --zone {self.zone} --source {source} --partition {partition}`"
            )
            writer.halt(source, partition, detail)
            self.alert(
                "partition_halted", {"source": source, "partition": partition, "table": exc.table, "detail": detail}
            )

    def partitions_stopped(self, exc: PartitionsStopped) -> None:
        """What the writer committed is counted and its locks alerted; each stopped partition
        is retried (the pass restarts from apply_state) while its event stays stopped:
        - waiting for its row's earlier versions (decide.py, "Waiting"), for up to
          `behind_timeout` seconds; then the writer is told to lock that row
          (the book's `expired_waits`) and the next attempt goes on past it;
        - in conflict on a unique key, for up to `unique_conflict_timeout` seconds; then
          the partition halts with an alert."""
        self.record(exc.result)
        stops, now = self.book.stops, time.monotonic()
        for source, partition, lsn, detail, kind in exc.blocked:
            key = (source, partition)
            stop = stops.get(key)
            since = stop[1] if stop and stop[0] == lsn else now
            timeout = self.settings.behind_timeout if kind == BEHIND else self.settings.unique_conflict_timeout
            if now - since < timeout:
                stops[key] = (lsn, since)
                log.warning("applier %s: %s: retrying serially", self.zone, detail)
                continue
            if kind == BEHIND:
                stops[key] = (lsn, since)  # still serial: the next attempt locks the row
                self.book.expired_waits.add((source, partition, lsn))
                log.warning("applier %s: %s: waited %g s: locking the row", self.zone, detail, timeout)
                continue
            stops.pop(key, None)
            detail = (
                f"{detail}: still in conflict after {timeout:g} s; another row holds the value "
                f"in the target: change or remove it, then `zonesync resume --zone {self.zone} --source {source} "
                f"--partition {partition}`"
            )
            self.writer().halt(source, partition, detail)
            self.alert("partition_halted", {"source": source, "partition": partition, "lsn": lsn, "detail": detail})
        time.sleep(0.1)
