"""Applying one partition's batch to the target zone, as one transaction.

Within a single transaction, on a session marked skip_replication (so the
source's replicator never publishes what we write: no loops):

0. claim: lock the batch's apply_state rows and check that each partition still
   stands where the batch's chain starts (apply_state.py: StalePosition, S003-36);
1. merge the batch per primary key (merge.py);
2. read the target rows FOR UPDATE, then their tombstones and their locks
   (looked up only when the table has any: target_rows.py). New rows skip the
   read (new_rows.py);
3. decide per row (decide.py): upsert, delete + tombstone, tombstone, skip, lock;
4. write (write_plan.py): deletes, multi-row upserts of rows the target has and
   INSERTs of rows it lacks, carrying the event's _zs_origin and _zs_version,
   tombstones (tombstones.py), new locks and events held by old locks
   (bookkeeping/row_locks.py). A resident table's rows are left out first unless
   their entity is admitted in this zone (resident.py). A table in copy mode (`copying`: the zone's
   zonesync.copy_tables as the applier last read it; decide.py, "Copy mode") is
   always read first, decided by version alone, and written with version-guarded
   statements (write_plan.py);
5. record the batch's last LSN and Kafka offset in zonesync.apply_state;
6. commit.

Because step 5 commits with the rows, a crash anywhere leaves either the
whole batch and its position, or neither: restart re-applies from the recorded
position, and the version checks make any overlap a no-op.

What goes wrong, and what the writer does then (apply_many):

- the new rows' INSERT meets a key, or the table has tombstones or locked rows
  after all: roll back, apply it again the read-first way (new_rows.py);
- a read-first write meets a unique value twice (a value moving between rows,
  applied out of the source's order): roll back, apply it again one event at a
  time in source order; what that cannot place stops its partition there and
  raises PartitionsStopped once the rest is committed ("Unique keys", S003-22:
  unique_keys.py);
- a change waits for versions of its row that another source has not delivered
  yet (decide.py, "Waiting"): roll back, apply it again serially, which stops
  that partition just before the change and raises PartitionsStopped once the
  rest is committed; the applier retries, and locks the row if the versions do
  not arrive in time (`expired_waits`);
- a deadlock or a lock-wait timeout: the whole transaction again;
- a server that refuses LOAD DATA LOCAL: INSERTs from then on (load_data.py);
- a table the target lacks, or a stale position: raised, nothing written;
- a table whose definition here disagrees with its events (the target refuses them, or
  their key is not its primary key): SchemaMismatch naming the tables and the
  difference, nothing written; the applier holds them, and from then on their events
  are parked in the transaction that applies the rest (table_holds.py).
"""

from __future__ import annotations

import logging
import math

import pymysql
from pymysql.constants import CLIENT

from zonesync.apply.batch import load_data, new_rows, target_rows
from zonesync.apply.batch.batch_result import BatchResult
from zonesync.apply.batch.literals import literal_function
from zonesync.apply.batch.merge import NetChange, merge
from zonesync.apply.batch.resident import ResidentGate
from zonesync.apply.batch.statements import send
from zonesync.apply.batch.table_holds import DEFINITION_ERRORS, TableHolds, diagnose, key_mismatch
from zonesync.apply.batch.unique_keys import apply_serial
from zonesync.apply.batch.write_plan import plan_writes
from zonesync.apply.bookkeeping import apply_state, tombstones
from zonesync.apply.errors import ApplyError, NotAllNew, TableMissing, WaitForVersions
from zonesync.events import INSERT, ChangeEvent, decode_row
from zonesync.runtime.endpoints import primary_key

log = logging.getLogger("zonesync.applier")


class ZoneWriter:
    """One connection to the target zone that applies batches."""

    _warned_idle = False  # the missing idle_transaction_timeout is said once per process

    def __init__(self, host: str, port: int, user: str, password: str, database: str):
        self.params = dict(host=host, port=port, user=user, password=password, database=database)
        self.database = database
        self.conn = None
        self._pks: dict[str, list[str]] = {}
        # Tables whose last look found a tombstone or a locked row: their new rows are
        # read first (a hint only: correctness comes from asking after the INSERT).
        self._marked: set[str] = set()
        self._load = True  # new rows as LOAD DATA (load_data.py), until a server refuses it
        # (source zone, partition, LSN) of events that waited too long for their row's
        # earlier versions: serial apply locks their row instead of waiting (the applier's set)
        self.expired_waits: set[tuple[str, int, int]] = set()
        self.table_weights: dict[str, int] = {}  # the applier's: lighter tables first in a transaction
        # the applier's (settings.py IDLE_TRANSACTION_S): the server rolls back a transaction
        # of this connection that stays open and silent this long (None: the server's default)
        self.idle_transaction_s: float | None = None
        # tables in copy mode (zonesync.copy_tables, decide.py "Copy mode"): the applier's, read
        # once a second and replaced whole when it changes
        self.copying: frozenset[str] = frozenset()
        # resident tables (resident.py): their rows applied only for the entities admitted
        # here; the applier sets `resident.tables` from the rules (and puts them in `copying`)
        self.resident = ResidentGate()
        self._other_unique: dict[str, bool] = {}  # table -> a unique key besides the primary key
        # tables held in this zone (table_holds.py): their events parked; the applier sets `holds.tables`
        self.holds = TableHolds()
        self.zone = ""  # the target zone's name, for what a SchemaMismatch says (the applier's)

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
            if self.idle_transaction_s:
                try:
                    self._limit_idle_transactions(self.conn)
                except BaseException:
                    self.close()  # never a connection without the limit it was asked for
                    raise
        return self.conn

    def _limit_idle_transactions(self, conn) -> None:
        """MariaDB ends a transaction left silent longer than idle_transaction_timeout
        (whole seconds). MySQL has no such variable (error 1193): there a frozen worker's
        transaction ends with its connection (wait_timeout)."""
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET SESSION idle_transaction_timeout = {max(1, math.ceil(self.idle_transaction_s))}")
        except pymysql.err.OperationalError as e:
            if e.args[0] != 1193:
                raise
            if not ZoneWriter._warned_idle:
                ZoneWriter._warned_idle = True
                log.warning("the zone has no idle_transaction_timeout (not MariaDB): a frozen applier's open "
                            "transaction keeps its locks until its connection ends")  # fmt: skip

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except pymysql.err.Error:
                pass
            self.conn = None

    def rollback(self, conn) -> None:
        """Roll back, or drop a connection that cannot: the next attempt opens a new one."""
        try:
            conn.rollback()
        except pymysql.err.Error:
            self.close()

    def forget(self, table: str) -> None:
        """What this writer learnt of a table's definition: asked again (after a schema change)."""
        self._pks.pop(table, None)
        self._other_unique.pop(table, None)
        self._marked.discard(table)
        self.holds.forget(table)

    def primary_key(self, table: str) -> list[str]:
        if table not in self._pks:
            pk = primary_key(self.connect(), table)  # (the connection's database)
            if not pk:
                raise TableMissing(
                    table, f"table {table} is missing in zone database {self.database} or has no primary key"
                )
            self._pks[table] = pk
        return self._pks[table]

    def keyed_by_primary_key(self, table: str, changes) -> list[str]:
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
                self.forget(table)
                raise key_mismatch(table, self.zone or self.database, sorted(change.pk), pk_cols)
        return pk_cols

    def apply_many(
        self, changes: list[tuple[str, list[ChangeEvent]]], positions: list[tuple[str, int, int, int, int]], park=True
    ) -> BatchResult:
        """Apply several partitions' events and record their positions, as one transaction.

        `changes` is (source zone, events in order) per partition; `positions` is
        (source zone, partition, applied LSN, Kafka offset, the LSN the chain starts after,
        and how many events the chain holds: counted for `zonesync reconcile`). One commit for all of them
        is what lets a busy applier's batches grow (Otter's batching): the fixed cost of
        a transaction is paid once per round, not once per partition. Positions may be
        left out (a lower table-weight level, applied before the level that records
        them): a crash in between re-applies those rows, and their versions make that
        a no-op.

        The attempts escalate: new rows unread, then read first, then (after a duplicate
        key on the read-first path) serially in source order; see the module's failure
        list for what each outcome leads to.

        Events of held tables are parked (table_holds.py), unless `park` is False (a
        drain applying parked events).
        """
        read_first = serial = False
        for attempt in range(7):
            conn = self.connect()
            try:
                # first in the transaction: the admits' shared lock (resident.py), the holds' (table_holds.py)
                kept, left_out = self.resident.kept(conn, changes)
                if park:
                    kept = self.holds.kept(conn, kept)
                if serial:
                    result = apply_serial(self, conn, kept, positions)
                else:
                    result = self._apply(conn, kept, positions, read_first)  # commits (its last statement)
                result.skipped += left_out
                return result
            except NotAllNew:
                self.rollback(conn)
                read_first = True
            except WaitForVersions:
                self.rollback(conn)
                serial = read_first = True
            except pymysql.err.MySQLError as exc:
                self.rollback(conn)
                if exc.args and exc.args[0] in DEFINITION_ERRORS:
                    raise self._mismatch(changes, exc) from exc
                if not self._retry_after(exc, attempt, serial):
                    raise
                if isinstance(exc, pymysql.err.IntegrityError):
                    # the new-rows INSERT met an existing key: read first; a read-first write met a
                    # unique value twice: one event at a time, in source order (unique_keys.py)
                    serial, read_first = read_first, True
            except BaseException:
                self.rollback(conn)
                raise
        raise ApplyError("unreachable")

    def _retry_after(self, exc, attempt: int, serial: bool) -> bool:
        """Whether a refused attempt is tried again: a duplicate key (escalating), a server
        without LOAD DATA LOCAL (INSERTs from now on), a deadlock or lock-wait timeout."""
        code = exc.args[0] if exc.args else None
        if isinstance(exc, pymysql.err.IntegrityError):
            return code == 1062 and not serial
        if isinstance(exc, pymysql.err.OperationalError):
            if code in load_data.DISABLED_ERRORS and self._load:
                self._load = False  # this server takes no LOAD DATA LOCAL: INSERTs from now on
                return True
            return code in (1205, 1213) and attempt < 6
        return False

    def _mismatch(self, changes, exc):
        """The target refused the batch for its tables' definitions: which, and how."""
        mismatch = diagnose(self.connect(), self.zone or self.database, changes, str(exc.args[-1]))
        for table in mismatch.tables:
            self.forget(table)
        return mismatch

    def _apply(self, conn, changes, positions, read_first: bool = False) -> BatchResult:
        """Steps 0-6 in two round trips for a round of one source and table: one
        request for the reads, one for every write, the positions and COMMIT (a third,
        the tombstone and lock lookups, when the table has tombstones or locked rows)."""
        result = BatchResult()
        lit = literal_function(conn)
        writes: list[str] = []
        with conn.cursor() as cur:
            apply_state.claim(cur, lit, positions)
            # replace_key rows: through the target's key map, after the claim (resident.py)
            changes, result.applied = self.resident.land_replaced(cur, changes)
            by_source: dict[str, list[ChangeEvent]] = {}
            for source_zone, events in changes:
                by_source.setdefault(source_zone, []).extend(events)
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
                    if not self._marked.intersection(new_by_table) and not self.copying.intersection(new_by_table):
                        for table, rows in self._in_weight_order(new_by_table):
                            send(cur, writes)
                            self._insert_new(cur, lit, table, rows, result)
                        continue
                by_table: dict[str, list[NetChange]] = {}
                for change in merge(events):
                    by_table.setdefault(change.table, []).append(change)
                for table, net in self._in_weight_order(by_table):
                    send(cur, writes)
                    writes = self._apply_table(cur, lit, source_zone, table, net, result, read_first)
            if positions:
                recorded = [position[:4] for position in positions]
                writes.append(apply_state.record(lit, recorded, apply_state.chain_events(positions)))
            writes.append("COMMIT")
            send(cur, writes)
        return result

    def _in_weight_order(self, by_table: dict) -> list:
        """(table, its changes), lightest table first (Otter's 权重: a parent before its child
        in one transaction, for foreign keys checked per statement); unweighted, as they came."""
        weights = self.table_weights
        if not weights:
            return list(by_table.items())
        return sorted(by_table.items(), key=lambda item: weights.get(item[0], 0))

    def _insert_new(self, cur, lit, table: str, events: list[ChangeEvent], result) -> None:
        """Insert events of a table without tombstones or locked rows, unmerged, as new rows
        (new_rows.py); raises NotAllNew when the table has either after all."""
        pk_cols = self.keyed_by_primary_key(table, events)
        first, loaded = new_rows.statements(cur, lit, table, [decode_row(e.new) for e in events], self._load)
        if target_rows.read(cur, lit, table, pk_cols, [], [], first, loaded)[3]:
            self._marked.add(table)
            raise NotAllNew(table)
        result.applied += len(events)
        result.new_rows += len(events)

    def _apply_table(
        self, cur, lit, source_zone: str, table: str, changes: list[NetChange], result, read_first: bool
    ) -> list[str]:
        """Read, decide; returns the write statements (not yet sent). The table's new rows,
        unless reading first, go ahead of the read as an INSERT (new_rows.py); in copy mode
        they are read first too (the copy may have written them: decided by version)."""
        pk_cols = self.keyed_by_primary_key(table, changes)
        copying = table in self.copying
        first: list[str] = []  # sent ahead of the reads: the new rows' INSERT
        loaded = 0  # rows a LOAD DATA in `first` must load
        if not read_first and not copying and table not in self._marked:
            fresh = [c for c in changes if c.first_op == INSERT and c.new is not None]
            if fresh:
                changes = [c for c in changes if c.first_op != INSERT or c.new is None]
                first, loaded = new_rows.statements(cur, lit, table, [decode_row(c.new) for c in fresh], self._load)
                result.applied += sum(c.events for c in fresh)
                result.new_rows += len(fresh)
        keys = [tuple([pk[k] for k in pk_cols]) for pk in [decode_row(c.pk) for c in changes]]
        texts = [c.pk_text for c in changes]
        targets, tombstone_versions, locks, marked = target_rows.read(
            cur, lit, table, pk_cols, keys, texts, first, loaded
        )
        if marked:
            self._marked.add(table)
            if first:
                raise NotAllNew(table)
        else:
            self._marked.discard(table)
        unique = copying and self.other_unique_keys(cur, table)
        entity_column = self.resident.tables.get(table, (None, None))[1]
        return plan_writes(lit, source_zone, table, pk_cols, changes, keys, targets, tombstone_versions, locks, result,
                           copying, unique, entity_column)  # fmt: skip

    def other_unique_keys(self, cur, table: str) -> bool:
        """Whether the table has a unique key besides its primary key (looked up once)."""
        if table not in self._other_unique:
            self._other_unique[table] = target_rows.other_unique_keys(cur, table)
        return self._other_unique[table]

    def copy_tables(self) -> frozenset[str]:
        """The tables in copy mode in this zone now (target_rows.copy_tables)."""
        return target_rows.copy_tables(self.connect())

    def ensure_positions(self, keys: list[tuple[str, int]]) -> None:
        """An apply_state row for every (source zone, partition): see apply_state.ensure."""
        if not keys:
            return
        apply_state.ensure(self.connect(), keys)

    def state(self) -> dict[tuple[str, int], tuple[int, int, str]]:
        """(source zone, partition) -> (applied LSN, Kafka offset, status)."""
        return apply_state.read(self.connect())

    def gc_tombstones(self, horizon_s: float) -> int:
        """Forget tombstones older than the horizon: no replay can be that late any more
        (resends reach back only as far as the kept checkpoints and binlogs)."""
        return tombstones.forget_older_than(self.connect(), horizon_s)

    def halt(self, source_zone: str, partition: int, detail: str) -> int:
        """Halt the partition; the applied LSN it stands at (apply_state.halt)."""
        return apply_state.halt(self.connect(), source_zone, partition, detail)
