"""Serial apply: the batch again, one event at a time, in source order, for unique-key
conflicts (S003-22) and for changes that wait for their row's earlier versions (S000-48).

A unique secondary value that moves between rows (X.u 5 -> 6, then Y.u = 5)
meets itself twice when the moves are applied out of the source's order: merged
per key (X 5 -> 9 -> 6 and Y 6 -> 5 become two one-step changes), or on different
workers (X and Y in different partitions; one worker's share reaches Y before the
other's commits X). A duplicate key on the read-first path is therefore applied
again serially (writer.py sends it here):

1. order: every event of the batch, unmerged, in source order (a source's in LSN
   order, across its partitions; sources interleaved by commit time, each one's
   order kept): source_order;
2. claim the positions and read the target rows of every key once (apply_state.py,
   target_rows.py);
3. decide each event against what the ones before it left, tracking the row, its
   tombstone and its lock per key, and write it (one transaction; each statement
   remembers the event it was written for); a table in copy mode is decided and
   written as write_plan.py does it (decide.py, "Copy mode": no waits);
4. record the positions and commit, in one numbered request: a duplicate key names
   the statement, hence the event (_Duplicate).

Failure cases:

- An event still meets a unique value another row holds: its partition stops
  there. The transaction is rolled back and built again without that partition's
  events from that one on, so everything else commits, with that partition's
  position just before it (its Kafka offset left where it was: its messages are
  read again, and what was applied is skipped by LSN). Then PartitionsStopped
  is raised, carrying what was applied and the stopped partitions; the applier
  applies its next rounds whole on one connection (both sides of a move made on
  different workers are then in one serial transaction), and halts a partition
  whose event stays in conflict (applier.py). Never dropped, never a data lock:
  the row that holds the value is not this change's row, and locking either would
  not free it.
- An event waits for versions of its row that another source has not delivered
  (decide.py, "Waiting": the target row is behind the event's old row): its
  partition stops there the same way. In source order, the other source's
  earlier events of the row go first whenever they are in the batch, so only a
  version that has not arrived at all stops a partition. The applier retries
  and, once the stop outlived `behind_timeout`, names the event in the writer's
  `expired_waits`: the next attempt locks the row (a data lock, alerted) and
  goes on.
- A duplicate primary key in serial order (a local insert of the key since the
  read) is the race of any insert: the attempt is made again, reading first (three
  times at most, then the error is raised).
"""

from __future__ import annotations

import heapq
import logging
from typing import Protocol

import pymysql

from zonesync.apply.batch import target_rows
from zonesync.apply.batch.batch_result import BatchResult
from zonesync.apply.batch.decide import DELETE_ROW, LOCK, SKIP, UPSERT, WAIT, Action, decide
from zonesync.apply.batch.literals import literal_function
from zonesync.apply.batch.merge import NetChange, merge
from zonesync.apply.batch.resident import ResidentGate
from zonesync.apply.batch.statements import guarded_deletes, inserts, key_condition, q, send_numbered, upserts
from zonesync.apply.bookkeeping import apply_state, row_locks, tombstones
from zonesync.apply.errors import BEHIND, UNIQUE, PartitionsStopped, Stop
from zonesync.events import ChangeEvent, decode_row, pk_text

log = logging.getLogger("zonesync.writer")


class SerialWriter(Protocol):
    """What serial apply needs of the writer (writer.py's ZoneWriter, which calls it): no
    import of the writer here, so the two modules do not import each other."""

    expired_waits: set[tuple[str, int, int]]
    copying: frozenset[str]  # tables in copy mode (decide.py, "Copy mode")
    resident: ResidentGate  # resident tables: their entity column (decide.py, "Copy mode")

    def rollback(self, conn) -> None: ...

    def keyed_by_primary_key(self, table: str, changes) -> list[str]: ...

    def other_unique_keys(self, cur, table: str) -> bool: ...


class _Wait(Exception):
    """An event of a serial attempt waits for its row's earlier versions (rolled back by the caller)."""

    def __init__(self, source: str, event: ChangeEvent, reason: str):
        super().__init__(reason)
        self.source, self.event, self.reason = source, event, reason


class _Duplicate(Exception):
    """A statement of a serial attempt met a duplicate key: the event it was written for."""

    def __init__(self, source: str, event: ChangeEvent, error: pymysql.err.IntegrityError):
        super().__init__(str(error))
        self.source, self.event, self.error = source, event, error


def apply_serial(writer: SerialWriter, conn, changes, positions) -> BatchResult:
    """The batch one event at a time, in source order: the result, or PartitionsStopped once
    the rest is committed."""
    stops: dict[tuple[str, int], tuple[int, str, str]] = {}  # (source, partition) -> (LSN, why, kind)
    races = 0
    while True:
        try:
            result = _attempt(writer, conn, changes, positions, stops)
        except _Wait as wait:
            writer.rollback(conn)
            e = wait.event
            stops[(wait.source, e.partition)] = (
                e.lsn,
                f"{e.table} {pk_text(e.pk)} (source {wait.source}, partition {e.partition}, LSN {e.lsn}): "
                f"{wait.reason}",
                BEHIND,
            )
            continue
        except _Duplicate as dup:
            writer.rollback(conn)
            e, message = dup.event, str(dup.error.args[1] if len(dup.error.args) > 1 else dup.error)
            if "PRIMARY'" in message:  # a local insert of the key since the read: read again
                races += 1
                if races > 3:
                    raise dup.error from None
                continue
            source = dup.source
            stops[(source, e.partition)] = (
                e.lsn,
                f"unique key conflict in {e.table}: {message}, writing {e.op} of {pk_text(e.pk)} (source "
                f"{source}, partition {e.partition}, LSN {e.lsn}), in source order",
                UNIQUE,
            )
            continue
        if stops:
            for why in stops.values():
                log.warning("%s: that partition stopped before it, the rest of the batch committed", why[1])
            raise PartitionsStopped(result, [Stop(s, p, *stop) for (s, p), stop in stops.items()])
        return result


def _attempt(writer: SerialWriter, conn, changes, positions, stops) -> BatchResult:
    """One transaction of the batch's events in source order, but for the partitions
    stopped at an event (from that event on); _Duplicate names the event whose write met
    a duplicate key (rolled back by the caller)."""
    result = BatchResult()
    lit = literal_function(conn)
    with conn.cursor() as cur:
        offsets = apply_state.claim(cur, lit, positions)
        # replace_key rows through the key map (resident.py), a stopped partition's before its stop only
        changes, result.applied = writer.resident.land_replaced(
            cur,
            changes,
            lambda source, e: (source, e.partition) not in stops or e.lsn < stops[(source, e.partition)][0],
        )
        order = source_order(changes, stops)
        # Read every key once; from then on `rows` is what the events so far left.
        by_table: dict[str, list[NetChange]] = {}
        for _, e in order:
            by_table.setdefault(e.table, []).append(_lone(e))
        # per (table, pk text): [target row, tombstone version, locked], as the events before leave it
        rows: dict[tuple[str, str], list] = {}
        pks: dict[str, list[str]] = {}
        for table, lone in by_table.items():
            pk_cols = pks[table] = writer.keyed_by_primary_key(table, lone)
            unique = list({c.pk_text: c for c in lone}.values())
            keys = [tuple([decode_row(c.pk)[k] for k in pk_cols]) for c in unique]
            texts = [c.pk_text for c in unique]
            targets, tombstone_versions, locks, _ = target_rows.read(cur, lit, table, pk_cols, keys, texts, [])
            for text in texts:
                rows[(table, text)] = [targets.get(text), tombstone_versions.get(text), text in locks]
        # Decide and write each event in order, remembering which event each statement is for.
        writes: list[str] = []
        owners: list[tuple[str, ChangeEvent]] = []  # the event each write is for
        last: dict[tuple[str, int], int] = {}  # the last LSN taken per stopped partition
        lone_of = {table: iter(lone) for table, lone in by_table.items()}
        for source, e in order:
            change = next(lone_of[e.table])
            if (source, e.partition) in stops:
                last[(source, e.partition)] = e.lsn
            state = rows[(e.table, change.pk_text)]
            copying = e.table in writer.copying
            entity_column = writer.resident.tables.get(e.table, (None, None))[1]
            action = decide(change, state[0], state[1], state[2], copying, entity_column)
            if action.kind == WAIT:
                if (source, e.partition, e.lsn) not in writer.expired_waits:
                    raise _Wait(source, e, action.reason)
                action = Action(LOCK, f"{action.reason}, and the versions between did not arrive in time")
            name = lit(e.table)
            event_writes: list[str] = []
            if action.kind in (SKIP, LOCK):
                result.skipped += 1
                if state[2]:
                    event_writes.append(row_locks.held(lit, name, change))
                elif action.kind == LOCK:
                    result.locked.append((source, e.table, change.pk_text, action.reason))
                    event_writes.append(row_locks.lock(lit, name, change, action.reason))
                    state[2] = True
            else:
                result.applied += 1
                unique = copying and writer.other_unique_keys(cur, e.table)
                event_writes += _writes(lit, change, action.kind, state, pks[e.table], copying, unique)
            writes += event_writes
            owners += [(source, e)] * len(event_writes)
        # Positions, then COMMIT, in the same request as the writes.
        recorded = _positions(positions, stops, last, offsets)
        if recorded:
            writes.append(apply_state.record(lit, recorded, _events(positions, changes, stops, last)))
        writes.append("COMMIT")
        try:
            send_numbered(cur, writes)
        except pymysql.err.IntegrityError as exc:
            at = getattr(exc, "statement", len(owners))
            if exc.args[0] != 1062 or at >= len(owners):
                raise
            source, e = owners[at]
            raise _Duplicate(source, e, exc) from exc
    return result


def _writes(lit, change: NetChange, kind: str, state: list, pk_cols: list[str], copying: bool, unique: bool):
    """The statements of one event that lands (an upsert or a delete), as write_plan.py
    writes them (copy mode's version-guarded ones when `copying`); `state` (the row, its
    tombstone's version, locked) is moved to what they leave."""
    table, name = change.table, lit(change.table)
    if kind == UPSERT:
        row = [decode_row(change.new)]
        had = state[0] is not None
        state[0] = change.new
        if copying and (had or not unique):
            return upserts(lit, table, row, guarded_by=pk_cols)
        return upserts(lit, table, row) if had else inserts(lit, table, row)
    # a delete (of the row, or a tombstone only)
    key = [tuple([decode_row(change.pk)[k] for k in pk_cols])]
    tombstone = tombstones.record(lit, name, [(change.pk_text, change.version)])
    writes = []
    if copying:  # the tombstone first (write_plan.py), then of a row the copy may have written since the read
        writes += [tombstone, *guarded_deletes(lit, table, pk_cols, key, [change.version])]
    else:
        if kind == DELETE_ROW:
            writes.append(f"DELETE FROM {q(table)} WHERE {key_condition(lit, pk_cols, key)}")
        writes.append(tombstone)
    state[0], state[1] = None, max(state[1] or 0, change.version)
    return writes


def _positions(positions, stops, last, offsets) -> list[tuple[str, int, int, int]]:
    """(source zone, partition, LSN, Kafka offset) to record: a stopped partition's just
    before its stop, with its old offset (its messages are read again), or nothing when
    it stopped at its first event."""
    recorded = []
    for s, p, lsn, offset, *_ in positions:
        if (s, p) in stops:
            if (s, p) not in last:
                continue
            lsn, offset = last[(s, p)], offsets.get((s, p), -1)
        recorded.append((s, p, lsn, offset))
    return recorded


def _events(positions, changes, stops, last) -> dict[tuple[str, int], int]:
    """The events each recorded partition commits: its whole chain, or, for a stopped one,
    those before its stop."""
    counts = apply_state.chain_events(positions)
    for source, events in changes:  # (one partition's chain each)
        key = (source, events[0].partition) if events else None
        if key in stops:
            counts[key] = 0 if key not in last else sum(1 for e in events if e.lsn <= last[key])
    return counts


def _lone(e: ChangeEvent) -> NetChange:
    """One event as a change of its own (serial apply: nothing merged)."""
    return merge([e])[0]


def source_order(changes, stops) -> list[tuple[str, ChangeEvent]]:
    """(source zone, event) for every event of the batch, in source order: a source's in
    LSN order (its binlog's, across its partitions), sources interleaved by commit time
    with each one's own order kept; a stopped partition's events from its stop on left out."""
    chains: dict[str, list] = {}
    for source, events in changes:
        chains.setdefault(source, []).append([(source, e) for e in events])
    streams = [heapq.merge(*lists, key=lambda item: item[1].lsn) for lists in chains.values()]
    return [
        (source, e)
        for source, e in heapq.merge(*streams, key=lambda item: item[1].commit_ts)
        if (source, e.partition) not in stops or e.lsn < stops[(source, e.partition)][0]
    ]
