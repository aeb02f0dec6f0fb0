"""Deciding a table's net changes against what the target holds, and the statements that follow.

Per row, decide.py says upsert, delete + tombstone, tombstone, skip or lock; this
turns those answers into the transaction's writes, carrying the event's
_zs_origin and _zs_version, and counts them in the batch's result.

Rows the target has are upserted; rows it lacks are INSERTed, never upserted:
MySQL's ON DUPLICATE KEY UPDATE takes whichever unique key conflicts, so an
upsert of a new key whose unique value another row holds would rewrite that
other row into this one (its primary key included). Deletes go first, then the
updates, then the inserts: a value freed by a delete or an update is free
before a new row takes it. A unique value that still meets itself is the serial
retry's (unique_keys.py), and so is a change that must wait for versions another
source has not delivered yet (decide.py, "Waiting": WaitForVersions).

Copy mode (decide.py, "Copy mode": the table is in the zone's zonesync.copy_tables):
an online full copy writes the same rows on other connections while the applier
does, and the applier's READ COMMITTED read locks only the rows it found, not the
keys it found absent. So its statements keep the newer row themselves: rows are
written as INSERT ... ON DUPLICATE KEY UPDATE that replaces a row only with a greater
_zs_version (statements.guarded_update), whether the target had the row or lacked it,
and deletes remove a row only while its _zs_version is below the delete's
(statements.guarded_deletes), for rows the target had and, in case the copy wrote
one since the read, for rows it lacked. Tombstones are written as always. One
exception keeps the rule above: in a table with a unique key besides the primary
key, rows the target lacked stay plain INSERTs (`other_unique_keys`): an upsert
would take over the row holding a new row's unique value, and a plain INSERT that
meets the copy's row of the same key fails and is applied again reading first.
"""

from __future__ import annotations

from zonesync.apply.batch.batch_result import BatchResult
from zonesync.apply.batch.decide import DELETE_ROW, LOCK, SKIP, UPSERT, WAIT, decide
from zonesync.apply.batch.merge import NetChange
from zonesync.apply.batch.statements import guarded_deletes, inserts, key_condition, q, upserts
from zonesync.apply.bookkeeping import row_locks, tombstones
from zonesync.apply.errors import WaitForVersions
from zonesync.events import decode_row


def plan_writes(
    lit,
    source_zone: str,
    table: str,
    pk_cols: list[str],
    changes: list[NetChange],
    keys: list[tuple],
    targets: dict[str, dict],
    tombstone_versions: dict[str, int],
    locks: dict[str, int],
    result: BatchResult,
    copying: bool = False,
    other_unique_keys: bool = False,
    entity_column: str | None = None,
) -> list[str]:
    """The write statements (not yet sent) for these changes of one table, given the
    target rows, tombstones and locks target_rows.read found for their keys. `copying`:
    the table is in copy mode; `other_unique_keys`: it has a unique key besides the
    primary key (see above)."""
    to_update: list[dict] = []  # rows the target has
    to_insert: list[dict] = []  # rows it lacks: INSERTed, never upserted (see above)
    deletes: list[tuple] = []  # keys of rows the target has
    gone: list[tuple[tuple, int]] = []  # (key, version) of every delete, of a row or a tombstone only
    new_tombstones: list[tuple[str, int]] = []
    writes: list[str] = []
    name = lit(table)
    for change, key in zip(changes, keys, strict=True):
        target = targets.get(change.pk_text)
        locked = change.pk_text in locks
        action = decide(change, target, tombstone_versions.get(change.pk_text), locked, copying, entity_column)
        if action.kind == WAIT:
            raise WaitForVersions(f"{table} {change.pk_text}: {action.reason}")
        if action.kind in (SKIP, LOCK):
            result.skipped += change.events
            if locked:
                writes.append(row_locks.held(lit, name, change))
            elif action.kind == LOCK:
                result.locked.append((source_zone, table, change.pk_text, action.reason))
                writes.append(row_locks.lock(lit, name, change, action.reason))
            continue
        result.applied += change.events
        if action.kind == UPSERT:
            (to_insert if target is None else to_update).append(decode_row(change.new))
            continue
        if action.kind == DELETE_ROW:
            deletes.append(key)
        gone.append((key, change.version))
        new_tombstones.append((change.pk_text, change.version))
    if copying:
        # The tombstones first: a chunk merge of the full copy (copy/merge.py) reads them
        # with a locking read, so it either committed before this (its row is then deleted
        # below) or waits for this transaction and sees them. Deleting first would let a
        # merge that locked the tombstones' gap insert the row after the guarded delete.
        if new_tombstones:
            writes.append(tombstones.record(lit, name, new_tombstones))
        return writes + _copy_writes(lit, table, pk_cols, gone, to_update, to_insert, other_unique_keys)
    writes += _writes(lit, table, pk_cols, deletes, to_update, to_insert)
    if new_tombstones:
        writes.append(tombstones.record(lit, name, new_tombstones))
    return writes


def _writes(lit, table: str, pk_cols: list[str], deletes: list[tuple], to_update: list, to_insert: list) -> list[str]:
    """Deletes first: a row deleted at the source frees its unique values before the rows
    that took them there are written (seed 003: delete X, then insert Y with X's value)."""
    writes: list[str] = []
    if deletes:
        # (the multi-table form takes an index hint: by primary key, never a scan that locks others' rows)
        cond = key_condition(lit, pk_cols, deletes)
        writes.append(f"DELETE {q(table)} FROM {q(table)} FORCE INDEX (PRIMARY) WHERE {cond}")
    if to_update:
        writes += upserts(lit, table, to_update)
    if to_insert:
        writes += inserts(lit, table, to_insert)
    return writes


def _copy_writes(
    lit, table: str, pk_cols: list[str], gone: list, to_update: list, to_insert: list, other_unique_keys: bool
) -> list[str]:
    """Copy mode's statements, in the same order: version-guarded deletes of every deleted
    key (the target's rows, and any row the copy wrote since the read), guarded upserts
    of the rows the target had, then of the rows it lacked (plain INSERTs in a table with
    another unique key: see above)."""
    writes: list[str] = []
    if gone:
        writes += guarded_deletes(lit, table, pk_cols, [k for k, _ in gone], [v for _, v in gone])
    if to_update:
        writes += upserts(lit, table, to_update, guarded_by=pk_cols)
    if to_insert:
        writes += inserts(lit, table, to_insert) if other_unique_keys else upserts(lit, table, to_insert, pk_cols)
    return writes
