"""Applying one partition's batch to the target zone, as one transaction.

Within a single transaction, on a session marked skip_replication (so the
source's replicator never publishes what we write: no loops):

1. merge the batch per primary key;
2. read the target rows FOR UPDATE, then their tombstones and their locks
   (looked up only when the table has any). New rows skip the read: see
   "New rows" below;
3. decide per row (decide.py): upsert, delete + tombstone, tombstone, skip, lock;
4. write: deletes, multi-row upserts of rows the target has and INSERTs of rows
   it lacks, carrying the event's _zs_origin and _zs_version, tombstones, new
   locks (and count events held by old locks);
5. record the batch's last LSN and Kafka offset in zonesync.apply_state;
6. commit.

Before step 1 the transaction locks the batch's apply_state rows and checks that
each partition still stands where the batch's chain starts (the first event's
prev_lsn). An applier that paused (SIGSTOP, a long GC, a hung host) while another
took over its partitions would otherwise commit a stale batch and move the
position back: its check fails, its transaction rolls back, and its pass restarts
from what apply_state says now (seed case S003-36). The rows exist from the pass's
start (ensure_positions), so the lock always has a row to hold.

Because step 5 commits with the rows, a crash anywhere leaves either the
whole batch and its position, or neither: restart re-applies from the recorded
position, and the version checks make any overlap a no-op.

New rows. A change that starts with an insert and ends with a row needs no
old-row check, only "no newer row, tombstone or lock". For a table whose last
look found no tombstone and no locked row, such changes are written as a
plain INSERT in the first request, before the reads of the other keys, and
the same request asks again whether the table has any tombstone or locked
row. The INSERT fails on any key that exists (a row of the target, one just
written by another source's events or by a local writer); the question,
asked after the INSERT took its row locks, sees any tombstone committed before
them (a later local delete waits for our commit). Either outcome rolls the
transaction back and applies it again the read-first way, which decides row
by row. Bulk loads of new rows (a catch-up, a migration) thereby cost the
target one INSERT per row instead of a locking read and an upsert. A source's
batch of nothing but inserts is not even merged: its keys are unique (the
source's primary key), and a repeated one fails the INSERT like any other.
Where it can, the INSERT is a LOAD DATA LOCAL sent from memory, checked to
load every row without a warning (load_data.py): the same outcomes, at about
two thirds of the target's CPU.

Rows the target has are upserted; rows it lacks are INSERTed, never upserted:
MySQL's ON DUPLICATE KEY UPDATE takes whichever unique key conflicts, so an
upsert of a new key whose unique value another row holds would rewrite that
other row into this one (its primary key included). Deletes go first, then the
updates, then the inserts: a value freed by a delete or an update is free
before a new row takes it.

Unique keys (S003-22). A unique secondary value that moves between rows (X.u
5 -> 6, then Y.u = 5) meets itself twice when the moves are applied out of the
source's order: merged per key (X 5 -> 9 -> 6 and Y 6 -> 5 become two one-step
changes), or on different workers (X and Y in different partitions; one
worker's share reaches Y before the other's commits X). A duplicate key on the
read-first path is therefore applied again serially: every event of the batch
one by one, unmerged, in source order (a source's in LSN order, across its
partitions; sources interleaved by commit time, each one's order kept), each
decided against what the ones before it left, in one transaction. If an event
still meets a unique value another row holds, its partition stops there: the
transaction is rolled back and built again without that partition's events
from that one on, so everything else commits, with that partition's position
just before it (its Kafka offset left where it was: its messages are read
again, and what was applied is skipped by LSN). Then UniqueConflict is raised,
carrying what was applied and the stopped partitions; the applier applies its
next rounds whole on one connection (both sides of a move made on different
workers are then in one serial transaction), and halts a partition whose event
stays in conflict (applier.py). Never dropped, never a data lock: the row that
holds the value is not this change's row, and locking either would not free it.
A duplicate primary key in serial order (a local insert of the key since the
read) is the race of any insert: the attempt is made again, reading first.
"""

from __future__ import annotations

import heapq
import json
import logging
from dataclasses import dataclass, field

import pymysql
from pymysql.constants import CLIENT

from zonesync.apply import load_data
from zonesync.apply.decide import DELETE_ROW, LOCK, SKIP, TOMBSTONE, UPSERT, decide
from zonesync.apply.literals import literal_function
from zonesync.apply.merge import NetChange, merge
from zonesync.apply.statements import (
    ApplyError,
    inserts,
    key_condition,
    q,
    result_sets,
    send,
    send_numbered,
    upserts,
)
from zonesync.capture.event import INSERT, ChangeEvent, decode_row, encode_row, pk_text

log = logging.getLogger("zonesync.writer")


class StalePosition(ApplyError):
    """A partition's apply_state is not where this batch's chain starts: another applier
    moved it. Nothing of the batch is written; the pass restarts from apply_state."""


class TableMissing(ApplyError):
    """Events for a table the target does not have (or that has no primary key). Retrying
    cannot help: the partitions that carried them halt (S001-17)."""

    def __init__(self, table: str, message: str, keys: set[tuple[str, int]] = frozenset()):
        super().__init__(message)
        self.table, self.keys = table, set(keys)  # keys: (source zone, partition)


class _NotAllNew(Exception):
    """The new-rows INSERT met an existing key, or the table has tombstones or locked
    rows after all: roll back and apply the batch the read-first way."""


class _Duplicate(Exception):
    """A statement of a serial attempt met a duplicate key: the event it was written for."""

    def __init__(self, source: str, event: ChangeEvent, error: pymysql.err.IntegrityError):
        super().__init__(str(error))
        self.source, self.event, self.error = source, event, error


class UniqueConflict(ApplyError):
    """Serial apply in source order left events in conflict on a unique key (see "Unique
    keys" above). Everything else of the batch is committed: `result` counts it; each of
    `blocked` (source zone, partition, LSN, detail) stopped just before that event."""

    def __init__(self, result: BatchResult, blocked: list[tuple[str, int, int, str]]):
        super().__init__("; ".join(detail for *_, detail in blocked))
        self.result, self.blocked = result, blocked


@dataclass
class BatchResult:
    applied: int = 0
    skipped: int = 0
    locked: list[tuple[str, str, str, str]] = field(default_factory=list)  # (source, table, pk, reason)
    new_rows: int = 0  # of the applied: rows written as new, without reading the target first


class ZoneWriter:
    """One connection to the target zone that applies batches."""

    def __init__(self, host: str, port: int, user: str, password: str, database: str):
        self.params = dict(host=host, port=port, user=user, password=password, database=database)
        self.database = database
        self.conn = None
        self._pks: dict[str, list[str]] = {}
        # Tables whose last look found a tombstone or a locked row: their new rows are
        # read first (a hint only: correctness comes from asking after the INSERT).
        self._marked: set[str] = set()
        self._load = True  # new rows as LOAD DATA (load_data.py), until a server refuses it

    def connect(self):
        if self.conn is None:
            self.conn = load_data.LoadConnection(
                **self.params,
                autocommit=False,
                local_infile=True,  # answered from memory only (load_data.py)
                client_flag=CLIENT.MULTI_STATEMENTS,  # a transaction's writes and COMMIT in one request
                # READ COMMITTED: no gap locks, so parallel batches inserting new keys never deadlock.
                init_command="SET time_zone = '+00:00', skip_replication = 1, tx_isolation = 'READ-COMMITTED'",
            )
        return self.conn

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except pymysql.err.Error:
                pass
            self.conn = None

    def primary_key(self, table: str) -> list[str]:
        if table not in self._pks:
            with self.connect().cursor() as cur:
                cur.execute(
                    "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                    (table,),
                )
                pk = [r[0] for r in cur.fetchall()]
            if not pk:
                raise TableMissing(
                    table, f"table {table} is missing in zone database {self.database} or has no primary key"
                )
            self._pks[table] = pk
        return self._pks[table]

    def apply_many(
        self, changes: list[tuple[str, list[ChangeEvent]]], positions: list[tuple[str, int, int, int, int]]
    ) -> BatchResult:
        """Apply several partitions' events and record their positions, as one transaction.

        `changes` is (source zone, events in order) per partition; `positions` is
        (source zone, partition, applied LSN, Kafka offset, the LSN the chain starts after). One commit for all of them
        is what lets a busy applier's batches grow (Otter's batching): the fixed cost of
        a transaction is paid once per round, not once per partition. Positions may be
        left out (a lower table-weight level, applied before the level that records
        them): a crash in between re-applies those rows, and their versions make that
        a no-op. A deadlock or lock-wait timeout retries the whole transaction.
        """
        read_first = serial = False
        for attempt in range(7):
            conn = self.connect()
            try:
                if serial:
                    return self._apply_serial(conn, changes, positions)
                return self._apply(conn, changes, positions, read_first)  # commits (its last statement)
            except _NotAllNew:
                self._rollback(conn)
                read_first = True
            except pymysql.err.IntegrityError as exc:
                self._rollback(conn)
                if exc.args[0] != 1062 or serial:
                    raise
                # the new-rows INSERT met an existing key: read first; a read-first write met a
                # unique value twice: one event at a time, in source order ("Unique keys" above)
                serial, read_first = read_first, True
            except pymysql.err.OperationalError as exc:
                self._rollback(conn)
                if exc.args[0] in load_data.DISABLED_ERRORS and self._load:
                    self._load = False  # this server takes no LOAD DATA LOCAL: INSERTs from now on
                    continue
                if exc.args[0] not in (1205, 1213) or attempt == 6:
                    raise
            except BaseException:
                self._rollback(conn)
                raise
        raise ApplyError("unreachable")

    def _rollback(self, conn) -> None:
        try:
            conn.rollback()
        except pymysql.err.Error:
            self.close()

    def _apply(self, conn, changes, positions, read_first: bool = False) -> BatchResult:
        """Steps 1-6 in two round trips for a round of one source and table: one
        request for the reads, one for every write, the positions and COMMIT (a third,
        the tombstone and lock lookups, when the table has tombstones or locked rows)."""
        result = BatchResult()
        by_source: dict[str, list[ChangeEvent]] = {}
        for source_zone, events in changes:
            by_source.setdefault(source_zone, []).extend(events)
        lit = literal_function(conn)
        writes: list[str] = []
        with conn.cursor() as cur:
            self._claim(cur, lit, positions)
            # One source at a time: a key's events from one source are in order (one
            # partition); two sources' changes of the same key are judged one after the
            # other by their versions, the second seeing what the first wrote (so the
            # writes queued so far are sent before the next reads).
            for source_zone, events in by_source.items():
                if not read_first and all(e.op == INSERT for e in events):
                    # Only inserts (a bulk load, a catch-up): a source's keys are unique (its
                    # primary key), so there is nothing to merge; a key seen twice fails the
                    # INSERT, and the batch is applied again read-first, merged.
                    new_by_table: dict[str, list[ChangeEvent]] = {}
                    for e in events:
                        new_by_table.setdefault(e.table, []).append(e)
                    if not self._marked.intersection(new_by_table):
                        for table, rows in new_by_table.items():
                            send(cur, writes)
                            self._insert_new(cur, lit, table, rows, result)
                        continue
                by_table: dict[str, list[NetChange]] = {}
                for change in merge(events):
                    by_table.setdefault(change.table, []).append(change)
                for table, net in by_table.items():
                    send(cur, writes)
                    writes = self._apply_table(cur, lit, source_zone, table, net, result, read_first)
            if positions:
                writes.append(_positions(lit, [position[:4] for position in positions]))
            writes.append("COMMIT")
            send(cur, writes)
        return result

    def _claim(self, cur, lit, positions) -> dict[tuple[str, int], int]:
        """Lock the batch's apply_state rows; StalePosition unless each stands where its
        chain starts (a missing row counts as LSN 0). Returns their Kafka offsets."""
        if not positions:
            return {}
        keys = ", ".join(f"({lit(s)}, {int(p)})" for s, p, *_ in positions)
        cur.execute(
            "SELECT source_zone, partition_no, applied_lsn, kafka_offset FROM zonesync.apply_state "
            f"WHERE (source_zone, partition_no) IN ({keys}) FOR UPDATE"
        )
        rows = cur.fetchall()
        at = {(s, int(p)): int(lsn) for s, p, lsn, _ in rows}
        for s, p, _, _, start in positions:
            if at.get((s, int(p)), 0) != start:
                raise StalePosition(
                    f"apply_state of {s} partition {p} is at LSN {at.get((s, int(p)), 0)}, this batch starts after "
                    f"{start}: another applier moved it; the batch is not applied"
                )
        return {(s, int(p)): int(offset) for s, p, _, offset in rows}

    def ensure_positions(self, keys: list[tuple[str, int]]) -> None:
        """An apply_state row for every (source zone, partition), at LSN 0 where there was
        none: the position check locks a row that is always there."""
        if not keys:
            return
        conn = self.connect()
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT IGNORE INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset) "
                "VALUES (%s, %s, 0, -1)",
                keys,
            )
        conn.commit()

    def _keyed_by_primary_key(self, table: str, changes) -> list[str]:
        """The table's primary key columns, once every event or net change is keyed by them;
        TableMissing names the partitions these changes came from."""
        try:
            pk_cols = self.primary_key(table)
        except TableMissing as exc:
            events = [getattr(c, "first_event", c) for c in changes]  # (a key's events share a partition)
            raise TableMissing(table, str(exc), {(e.source_zone, e.partition) for e in events}) from None
        columns = set(pk_cols)
        for change in changes:
            if change.pk.keys() != columns:
                raise ApplyError(f"event for {table} keyed by {sorted(change.pk)}, but its primary key is {pk_cols}")
        return pk_cols

    def _insert_new(self, cur, lit, table: str, events: list[ChangeEvent], result) -> None:
        """Insert events of a table without tombstones or locked rows, unmerged, as new rows
        (see "New rows" above); raises _NotAllNew when the table has either after all."""
        pk_cols = self._keyed_by_primary_key(table, events)
        first, loaded = self._new_rows(cur, lit, table, [decode_row(e.new) for e in events])
        if self._read(cur, lit, table, pk_cols, [], [], first, loaded)[3]:
            self._marked.add(table)
            raise _NotAllNew(table)
        result.applied += len(events)
        result.new_rows += len(events)

    def _new_rows(self, cur, lit, table: str, rows: list[dict]) -> tuple[list[str], int]:
        """The statements that write these rows as new, and how many rows a LOAD DATA among
        them must load: one LOAD DATA, its rows handed to the connection (load_data.py),
        or multi-row INSERTs (0)."""
        data = load_data.payload(rows, lit) if self._load else None
        if data is None:
            return inserts(lit, table, rows), 0
        cur.connection.payload = data
        return [load_data.statement(q(table), ", ".join(q(c) for c in rows[0]))], len(rows)

    def _apply_table(
        self, cur, lit, source_zone: str, table: str, changes: list[NetChange], result, read_first: bool
    ) -> list[str]:
        """Read, decide; returns the write statements (not yet sent)."""
        pk_cols = self._keyed_by_primary_key(table, changes)
        first: list[str] = []  # sent ahead of the reads: the new rows' INSERT
        loaded = 0  # rows a LOAD DATA in `first` must load
        if not read_first and table not in self._marked:
            new_rows = [c for c in changes if c.first_op == INSERT and c.new is not None]
            if new_rows:
                changes = [c for c in changes if c.first_op != INSERT or c.new is None]
                first, loaded = self._new_rows(cur, lit, table, [decode_row(c.new) for c in new_rows])
                result.applied += sum(c.events for c in new_rows)
                result.new_rows += len(new_rows)
        keys = [tuple([pk[k] for k in pk_cols]) for pk in [decode_row(c.pk) for c in changes]]
        texts = [c.pk_text for c in changes]
        targets, tombstones, locks, marked = self._read(cur, lit, table, pk_cols, keys, texts, first, loaded)
        if marked:
            self._marked.add(table)
            if first:
                raise _NotAllNew(table)
        else:
            self._marked.discard(table)

        writes: list[str] = []
        to_update: list[dict] = []  # rows the target has
        to_insert: list[dict] = []  # rows it lacks: INSERTed, never upserted ("Rows the target has" above)
        deletes: list[tuple] = []
        new_tombstones: list[tuple[str, int]] = []
        name = lit(table)
        for change, key in zip(changes, keys, strict=True):
            target = targets.get(change.pk_text)
            action = decide(change, target, tombstones.get(change.pk_text), change.pk_text in locks)
            if action.kind == SKIP:
                result.skipped += change.events
                if change.pk_text in locks:
                    writes.append(_held(lit, name, change))
                continue
            if action.kind == LOCK:
                result.locked.append((source_zone, table, change.pk_text, action.reason))
                writes.append(_lock(lit, name, change, action.reason))
                result.skipped += change.events
                continue
            result.applied += change.events
            if action.kind == UPSERT:
                (to_insert if target is None else to_update).append(decode_row(change.new))
            elif action.kind == DELETE_ROW:
                deletes.append(key)
                new_tombstones.append((change.pk_text, change.version))
            elif action.kind == TOMBSTONE:
                new_tombstones.append((change.pk_text, change.version))
        # Deletes first: a row deleted at the source frees its unique values before the rows
        # that took them there are written (seed 003: delete X, then insert Y with X's value).
        if deletes:
            writes.append(f"DELETE FROM {q(table)} WHERE {key_condition(lit, pk_cols, deletes)}")
        if to_update:
            writes += upserts(lit, table, to_update)
        if to_insert:
            writes += inserts(lit, table, to_insert)
        if new_tombstones:
            writes.append(_tombstones(lit, name, new_tombstones))
        return writes

    def _apply_serial(self, conn, changes, positions) -> BatchResult:
        """The batch one event at a time, in source order (see "Unique keys" above): the
        result, or UniqueConflict once the rest is committed."""
        stops: dict[tuple[str, int], tuple[int, str]] = {}  # (source, partition) -> (LSN, why)
        races = 0
        while True:
            try:
                result = self._serial_attempt(conn, changes, positions, stops)
            except _Duplicate as dup:
                self._rollback(conn)
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
                )
                continue
            if stops:
                for why in stops.values():
                    log.warning("%s: that partition stopped before it, the rest of the batch committed", why[1])
                raise UniqueConflict(result, [(s, p, lsn, why) for (s, p), (lsn, why) in stops.items()])
            return result

    def _serial_attempt(self, conn, changes, positions, stops) -> BatchResult:
        """One transaction of the batch's events in source order, but for the partitions
        stopped at an event (from that event on); _Duplicate names the event whose write met
        a duplicate key (rolled back by the caller)."""
        result = BatchResult()
        lit = literal_function(conn)
        order = _source_order(changes, stops)
        with conn.cursor() as cur:
            offsets = self._claim(cur, lit, positions)
            by_table: dict[str, list[NetChange]] = {}
            for _, e in order:
                by_table.setdefault(e.table, []).append(_lone(e))
            # per (table, pk text): [target row, tombstone version, locked], as the events before leave it
            rows: dict[tuple[str, str], list] = {}
            pks: dict[str, list[str]] = {}
            for table, lone in by_table.items():
                pk_cols = pks[table] = self._keyed_by_primary_key(table, lone)
                unique = list({c.pk_text: c for c in lone}.values())
                keys = [tuple([decode_row(c.pk)[k] for k in pk_cols]) for c in unique]
                texts = [c.pk_text for c in unique]
                targets, tombstones, locks, _ = self._read(cur, lit, table, pk_cols, keys, texts, [])
                for text in texts:
                    rows[(table, text)] = [targets.get(text), tombstones.get(text), text in locks]
            writes: list[str] = []
            owners: list[tuple[str, ChangeEvent]] = []  # the event each write is for
            last: dict[tuple[str, int], int] = {}  # the last LSN taken per stopped partition
            lone_of = {table: iter(lone) for table, lone in by_table.items()}
            for source, e in order:
                change = next(lone_of[e.table])
                if (source, e.partition) in stops:
                    last[(source, e.partition)] = e.lsn
                state = rows[(e.table, change.pk_text)]
                target = state[0]
                action = decide(change, target, state[1], state[2])
                name = lit(e.table)
                event_writes: list[str] = []
                if action.kind in (SKIP, LOCK):
                    result.skipped += 1
                    if state[2]:
                        event_writes.append(_held(lit, name, change))
                    elif action.kind == LOCK:
                        result.locked.append((source, e.table, change.pk_text, action.reason))
                        event_writes.append(_lock(lit, name, change, action.reason))
                        state[2] = True
                else:
                    result.applied += 1
                    if action.kind == UPSERT:
                        row = [decode_row(change.new)]
                        event_writes += upserts(lit, e.table, row) if target is not None else inserts(lit, e.table, row)
                        state[0] = change.new
                    else:  # a delete (of the row, or a tombstone only)
                        if action.kind == DELETE_ROW:
                            key = [tuple([decode_row(change.pk)[k] for k in pks[e.table]])]
                            where = key_condition(lit, pks[e.table], key)
                            event_writes.append(f"DELETE FROM {q(e.table)} WHERE {where}")
                        event_writes.append(_tombstones(lit, name, [(change.pk_text, change.version)]))
                        state[0], state[1] = None, max(state[1] or 0, change.version)
                writes += event_writes
                owners += [(source, e)] * len(event_writes)
            recorded = []
            for s, p, lsn, offset, _ in positions:
                if (s, p) in stops:  # just before its stop, its messages read again (the old offset)
                    if (s, p) not in last:
                        continue
                    lsn, offset = last[(s, p)], offsets.get((s, p), -1)
                recorded.append((s, p, lsn, offset))
            if recorded:
                writes.append(_positions(lit, recorded))
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

    def _read(self, cur, lit, table, pk_cols, keys, texts, first: list[str], loaded: int = 0):
        """The target rows (locked FOR UPDATE), their tombstones' versions, the held
        counts of locked rows, by pk text, and whether the table has any tombstone or
        locked row. `first` (the new rows' INSERT, or a LOAD DATA of `loaded` rows) runs
        ahead of it all, in the same request.

        The first request reads the target rows and asks whether the table has any
        tombstone or locked row at all; only when it does, a second request looks the
        batch's keys up (an IN list of pk texts costs the server about 3 µs per key, a
        third of what the whole apply costs it, and most tables hold no locked rows and
        no recent deletes). Both requests run after the FOR UPDATE read, as the single
        lookup did: a local delete that committed while we waited for a row's lock has
        written its tombstone (dal/transaction.py, in the same transaction), and the
        probe or the lookup after it sees that tombstone. Nothing is cached between
        batches: another process may write a tombstone at any moment.
        """
        reads: list[str] = list(first)
        for start in range(0, len(keys), 500):
            cond = key_condition(lit, pk_cols, keys[start : start + 500])
            reads.append(f"SELECT * FROM {q(table)} WHERE {cond} FOR UPDATE")
        name = lit(table)
        reads.append(
            f"SELECT EXISTS (SELECT 1 FROM zonesync.tombstones WHERE table_name = {name}), "
            f"EXISTS (SELECT 1 FROM zonesync.row_locks WHERE table_name = {name})"
        )
        targets: dict[str, dict] = {}
        sets = result_sets(cur, reads)
        for _ in first:
            next(sets)
        # LOCAL skips a duplicate key and truncates a value that does not fit, with a warning
        # each, where the INSERT would have failed (a LOAD DATA is all of `first`)
        if loaded and (cur.rowcount != loaded or cur._result.warning_count):
            raise _NotAllNew(table)
        for _ in range(len(reads) - len(first) - 1):
            rows = next(sets)
            names = [d[0] for d in cur.description]
            for row in rows:
                record = encode_row(dict(zip(names, row, strict=True)))
                targets[pk_text({c: record[c] for c in pk_cols})] = record
        ((any_tombstone, any_lock),) = next(sets)
        tombstones: dict[str, int] = {}
        locks: dict[str, int] = {}
        marked = bool(any_tombstone or any_lock)
        if not marked or not keys:
            return targets, tombstones, locks, marked
        lookups: list[str] = []
        for start in range(0, len(texts), 500):
            marks = ", ".join([lit(t) for t in texts[start : start + 500]])
            parts = []
            if any_tombstone:
                parts.append(
                    f"SELECT 't', pk, version FROM zonesync.tombstones WHERE table_name = {name} AND pk IN ({marks})"
                )
            if any_lock:
                parts.append(
                    f"SELECT 'l', pk, held_events FROM zonesync.row_locks WHERE table_name = {name} AND pk IN ({marks})"
                )
            lookups.append(" UNION ALL ".join(parts))
        for rows in result_sets(cur, lookups):
            for kind, pk, value in rows:
                (tombstones if kind == "t" else locks)[pk] = int(value)
        return targets, tombstones, locks, marked

    def state(self) -> dict[tuple[str, int], tuple[int, int, str]]:
        """(source zone, partition) -> (applied LSN, Kafka offset, status)."""
        conn = self.connect()
        with conn.cursor() as cur:
            cur.execute("SELECT source_zone, partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state")
            rows = cur.fetchall()
        conn.commit()
        return {(s, int(p)): (int(lsn), int(off), st) for s, p, lsn, off, st in rows}

    def gc_tombstones(self, horizon_s: float) -> int:
        """Forget tombstones older than the horizon: no replay can be that late any more
        (resends reach back only as far as the kept checkpoints and binlogs)."""
        conn = self.connect()
        with conn.cursor() as cur:
            n = cur.execute(
                "DELETE FROM zonesync.tombstones WHERE deleted_at < NOW(6) - INTERVAL %s SECOND LIMIT 10000",
                (int(horizon_s),),
            )
        conn.commit()
        return n

    def halt(self, source_zone: str, partition: int, detail: str) -> None:
        conn = self.connect()
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset, status, "
                "detail) VALUES (%s, %s, 0, -1, 'halted', %s) ON DUPLICATE KEY UPDATE status = 'halted', "
                "detail = VALUES(detail)",
                (source_zone, partition, detail[:500]),
            )
        conn.commit()


def _positions(lit, positions) -> str:
    """Record (source zone, partition, applied LSN, Kafka offset) in apply_state."""
    return (
        "INSERT INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset) VALUES "
        + ", ".join(f"({lit(s)}, {int(p)}, {int(lsn)}, {int(off)})" for s, p, lsn, off in positions)
        + " ON DUPLICATE KEY UPDATE applied_lsn = VALUES(applied_lsn), kafka_offset = VALUES(kafka_offset)"
    )


def _held(lit, name: str, change: NetChange) -> str:
    """Count a locked row's change as held."""
    return (
        f"UPDATE zonesync.row_locks SET held_events = held_events + {change.events} "
        f"WHERE table_name = {name} AND pk = {lit(change.pk_text)}"
    )


def _lock(lit, name: str, change: NetChange, reason: str) -> str:
    """Lock a row: the first event is the one that locked it; merged later ones are held."""
    return (
        "INSERT INTO zonesync.row_locks (table_name, pk, reason, first_event, held_events) VALUES "
        f"({name}, {lit(change.pk_text)}, {lit(reason[:500])}, {lit(_ascii_json(change.first_event))}, "
        f"{change.events - 1}) ON DUPLICATE KEY UPDATE held_events = held_events + {change.events}"
    )


def _tombstones(lit, name: str, tombstones: list[tuple[str, int]]) -> str:
    return (
        "INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES "
        + ", ".join(f"({name}, {lit(text)}, {int(version)})" for text, version in tombstones)
        + " ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version)), deleted_at = NOW(6)"
    )


def _lone(e: ChangeEvent) -> NetChange:
    """One event as a change of its own (serial apply: nothing merged)."""
    return merge([e])[0]


def _source_order(changes, stops) -> list[tuple[str, ChangeEvent]]:
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


def _ascii_json(event: ChangeEvent) -> str:
    """The event as JSON with \\u escapes: it fits row_locks.first_event whatever the
    `zonesync` database's character set (the wire form is raw UTF-8). Rare: locks only."""
    return json.dumps(json.loads(event.to_json()), separators=(",", ":"))


def lock_list(conn) -> list[dict]:
    with conn.cursor() as cur:
        cur.execute("SELECT table_name, pk, reason, held_events, locked_at, first_event FROM zonesync.row_locks")
        rows = cur.fetchall()
    return [
        {"table": t, "pk": json.loads(pk), "reason": r, "held_events": int(h), "locked_at": at, "event": e}
        for t, pk, r, h, at, e in rows
    ]
