"""The applier's exceptions, in one place below every layer of apply/ (loop, batch,
bookkeeping and tools all raise or catch them; this module imports nothing of apply/).

What each one means, and what the applier does with it:

- ApplyError: a batch that cannot be applied as it stands; the base of the others.
- StalePosition: a partition's apply_state is not where a batch's chain starts (another
  applier moved it, S003-36): nothing written, the pass restarts from apply_state.
- PartitionHalted: a partition of the batch was halted since it was read (`zonesync
  halt`): nothing written, the pass restarts and leaves it halted.
- TableMissing: events for a table the target lacks or that has no primary key: the
  partitions that carried them halt (S001-17).
- SchemaMismatch: events of tables whose definition in the target disagrees with them
  (a column renamed, dropped, added or retyped on one side; a changed primary key):
  those tables are held, their events parked, and every other table goes on
  (batch/table_holds.py).
- PartitionsStopped: serial apply stopped partitions before events it could not place
  (a unique value another row holds; a row whose earlier versions have not arrived);
  the rest committed. The applier retries them serially, then halts or locks.
- NotAllNew, WaitForVersions: the writer's own signals between its attempts (roll back,
  then read first; roll back, then serially); they never leave the writer.
"""

from __future__ import annotations

from typing import NamedTuple

UNIQUE, BEHIND = "unique", "behind"  # why a partition stopped (Stop.kind)


class ApplyError(RuntimeError):
    pass


class StalePosition(ApplyError):
    """A partition's apply_state is not where this batch's chain starts: another applier
    moved it. Nothing of the batch is written; the pass restarts from apply_state."""


class PartitionHalted(StalePosition):
    """A partition of this batch was halted since its events were read (`zonesync halt`):
    nothing of the batch is written; the pass restarts and leaves the partition halted."""


class TableMissing(ApplyError):
    """Events for a table the target does not have (or that has no primary key). Retrying
    cannot help: the partitions that carried them halt (S001-17)."""

    def __init__(self, table: str, message: str, keys: set[tuple[str, int]] = frozenset()):
        super().__init__(message)
        self.table, self.keys = table, set(keys)  # keys: (source zone, partition)


class SchemaMismatch(ApplyError):
    """Tables whose definition in the target disagrees with their events (table_holds.py):
    `tables` maps each to what differs. Retrying cannot help: the tables are held."""

    def __init__(self, tables: dict[str, str], misfits: set[str] = frozenset()):
        super().__init__("; ".join(f"{t}: {why}" for t, why in sorted(tables.items())) or "definitions disagree")
        self.tables = dict(tables)
        # tables whose events' columns or key tell which fit (only those that do not are
        # parked); the others' every event is parked (a value that did not fit)
        self.misfits = set(misfits) & set(tables)


class Stop(NamedTuple):
    source: str
    partition: int
    lsn: int  # the event it stopped before
    detail: str
    kind: str  # UNIQUE: a unique value another row holds; BEHIND: the row's earlier versions


class PartitionsStopped(ApplyError):
    """Serial apply in source order stopped partitions before events it could not place
    (batch/unique_keys.py). Everything else of the batch is committed: `result` (a
    BatchResult) counts it; each of `blocked` stopped just before its event."""

    def __init__(self, result, blocked: list[Stop]):
        super().__init__("; ".join(stop.detail for stop in blocked))
        self.result, self.blocked = result, blocked


class NotAllNew(Exception):
    """The new-rows INSERT met an existing key, or the table has tombstones or locked
    rows after all: roll back and apply the batch the read-first way (batch/new_rows.py)."""


class WaitForVersions(Exception):
    """A change of the batch waits for versions of its row from another source (decide.py,
    "Waiting"): the writer rolls back and applies the batch serially, which stops that
    change's partition just before it (batch/unique_keys.py)."""
