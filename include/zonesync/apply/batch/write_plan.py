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
"""

from __future__ import annotations

from zonesync.apply.batch.batch_result import BatchResult
from zonesync.apply.batch.decide import DELETE_ROW, LOCK, SKIP, TOMBSTONE, UPSERT, WAIT, decide
from zonesync.apply.batch.merge import NetChange
from zonesync.apply.batch.statements import inserts, key_condition, q, upserts
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
) -> list[str]:
    """The write statements (not yet sent) for these changes of one table, given the
    target rows, tombstones and locks target_rows.read found for their keys."""
    writes: list[str] = []
    to_update: list[dict] = []  # rows the target has
    to_insert: list[dict] = []  # rows it lacks: INSERTed, never upserted (see above)
    deletes: list[tuple] = []
    new_tombstones: list[tuple[str, int]] = []
    name = lit(table)
    for change, key in zip(changes, keys, strict=True):
        target = targets.get(change.pk_text)
        action = decide(change, target, tombstone_versions.get(change.pk_text), change.pk_text in locks)
        if action.kind == WAIT:
            raise WaitForVersions(f"{table} {change.pk_text}: {action.reason}")
        if action.kind == SKIP:
            result.skipped += change.events
            if change.pk_text in locks:
                writes.append(row_locks.held(lit, name, change))
            continue
        if action.kind == LOCK:
            result.locked.append((source_zone, table, change.pk_text, action.reason))
            writes.append(row_locks.lock(lit, name, change, action.reason))
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
        # (the multi-table form takes an index hint: by primary key, never a scan that locks others' rows)
        cond = key_condition(lit, pk_cols, deletes)
        writes.append(f"DELETE {q(table)} FROM {q(table)} FORCE INDEX (PRIMARY) WHERE {cond}")
    if to_update:
        writes += upserts(lit, table, to_update)
    if to_insert:
        writes += inserts(lit, table, to_insert)
    if new_tombstones:
        writes.append(tombstones.record(lit, name, new_tombstones))
    return writes
