"""Copy mode (seed 000, Incremental Copy; decide.py "Copy mode", write_plan.py): while an
online full copy fills a table, the applier decides its changes by version alone (an
update or insert lands as an upsert of the full new row, a delete stays a delete with
its tombstone, never a wait or a new lock) and writes them with version-guarded SQL,
since the copy writes the same keys on other connections.

Each decision is also checked outside copy mode, where the same change still waits or
locks: the flag, not the change, makes the difference.
"""

from __future__ import annotations

import pytest

from tests.support.events import sql_lit, tenant_event, tenant_row
from zonesync.apply.batch.batch_result import BatchResult
from zonesync.apply.batch.decide import DELETE_ROW, LOCK, SKIP, TOMBSTONE, UPSERT, WAIT, decide
from zonesync.apply.batch.merge import merge
from zonesync.apply.batch.statements import guarded_deletes, guarded_update, upserts
from zonesync.apply.batch.write_plan import plan_writes
from zonesync.apply.errors import ApplyError, WaitForVersions
from zonesync.events import DELETE, INSERT, UPDATE

pytestmark = pytest.mark.unit

TABLE = "tenants"


lit, row, ev = sql_lit, tenant_row, tenant_event


def one(*events):
    (change,) = merge(list(events))
    return change


UPDATE_5_TO_6 = ev(20, UPDATE, 1, 6, old=row(1, 5), new=row(1, 6, "new"))
DELETE_OF_5 = ev(30, DELETE, 1, 6, old=row(1, 5))
INSERT_AT_6 = ev(10, INSERT, 1, 6, new=row(1, 6, "inserted"))


# (change, target row, tombstone, copy mode's answer, the answer outside copy mode)
CASES = {
    # S000-73: the update reaches the target before the copy's row: it lands as the full new row
    "update of an absent row": (one(UPDATE_5_TO_6), None, None, UPSERT, WAIT),
    "update of an absent row above an older tombstone": (one(UPDATE_5_TO_6), None, 3, UPSERT, WAIT),
    # S000-72: the copy brought a newer row than the replayed update
    "update older than the target": (one(UPDATE_5_TO_6), row(1, 9, "copied"), None, SKIP, SKIP),
    "update as new as the target": (one(UPDATE_5_TO_6), row(1, 6, "copied"), None, SKIP, SKIP),
    # the copy's row is behind the event's old row (versions between not arrived): no waiting
    "update of a row behind its old row": (one(UPDATE_5_TO_6), row(1, 4, "copied"), None, UPSERT, WAIT),
    # the copy's row at the old row's version but other values (read mid-change): no lock
    "update of a row that differs from its old row": (one(UPDATE_5_TO_6), row(1, 5, "other"), None, UPSERT, LOCK),
    "update of a row deleted later": (one(UPDATE_5_TO_6), None, 7, SKIP, SKIP),
    # S000-76: the delete reaches the target before the copy's row: a tombstone keeps it out
    "delete of an absent row": (one(DELETE_OF_5), None, None, TOMBSTONE, WAIT),
    "delete of an older row": (one(DELETE_OF_5), row(1, 4, "copied"), None, DELETE_ROW, WAIT),
    "delete of a newer target row": (one(DELETE_OF_5), row(1, 8, "copied"), None, SKIP, SKIP),
    "replayed delete": (one(DELETE_OF_5), None, 6, SKIP, SKIP),
    # S000-71: an insert meeting the copy's (older) row of the same key: the newer row wins
    "insert meeting an older row": (one(INSERT_AT_6), row(1, 2, "copied"), None, UPSERT, LOCK),
    "insert meeting a newer row": (one(INSERT_AT_6), row(1, 7, "copied"), None, SKIP, SKIP),
    "insert as new as another row": (one(INSERT_AT_6), row(1, 6, "other", origin=2), None, SKIP, LOCK),
    "insert of an absent row": (one(INSERT_AT_6), None, None, UPSERT, UPSERT),
    "insert below a tombstone": (one(INSERT_AT_6), None, 6, SKIP, SKIP),
    # merged: insert + delete of a row the copy already brought (older): the row goes
    "insert and delete over an older row": (
        one(INSERT_AT_6, ev(40, DELETE, 1, 7, old=row(1, 6, "inserted"))),
        row(1, 3, "copied"),
        None,
        DELETE_ROW,
        LOCK,
    ),
    "update chain over an absent row": (
        one(UPDATE_5_TO_6, ev(40, UPDATE, 1, 8, old=row(1, 6, "new"), new=row(1, 8, "newer"))),
        None,
        None,
        UPSERT,
        WAIT,
    ),
}


@pytest.mark.parametrize("change, target, tomb, copying, normal", CASES.values(), ids=CASES.keys())
def test_copy_mode_decides_by_version_alone(change, target, tomb, copying, normal):
    assert decide(change, target, tomb, False, copying=True).kind == copying
    assert decide(change, target, tomb, False).kind == normal, "outside copy mode the rules are as before"


@pytest.mark.parametrize("change, target, tomb, copying, normal", CASES.values(), ids=CASES.keys())
def test_copy_mode_never_waits_or_locks_and_a_locked_row_stays_held(change, target, tomb, copying, normal):
    assert copying not in (WAIT, LOCK)
    locked = decide(change, target, tomb, True, copying=True)
    assert locked.kind == SKIP and "locked" in locked.reason


# -- the statements ---------------------------------------------------------------------------


def test_the_guarded_update_replaces_columns_only_with_a_newer_version_and_assigns_it_last():
    clause = guarded_update(TABLE, ("tenant_id", "name", "_zs_origin", "_zs_version"), ["tenant_id"])
    assert clause == (
        " ON DUPLICATE KEY UPDATE "
        "`name` = IF(VALUES(`_zs_version`) > `_zs_version`, VALUES(`name`), `name`), "
        "`_zs_origin` = IF(VALUES(`_zs_version`) > `_zs_version`, VALUES(`_zs_origin`), `_zs_origin`), "
        "`_zs_version` = GREATEST(`_zs_version`, VALUES(`_zs_version`))"
    )


def test_the_guarded_update_puts_the_version_last_whatever_the_column_order():
    clause = guarded_update(TABLE, ("_zs_version", "tenant_id", "name", "_zs_origin"), ["tenant_id"])
    sets = clause.removeprefix(" ON DUPLICATE KEY UPDATE ").split(", `")
    assert sets[-1].startswith("_zs_version` = GREATEST(")
    assert "`tenant_id` =" not in clause, "the key is never rewritten"


def test_a_row_without_its_version_cannot_be_written_guarded():
    with pytest.raises(ApplyError, match="_zs_version"):
        guarded_update(TABLE, ("tenant_id", "name"), ["tenant_id"])


def test_guarded_upserts_and_plain_upserts_differ_only_in_their_update_clause():
    rows = [row(1, 6, "a"), row(2, 7, "b")]
    (guarded,) = upserts(lit, TABLE, rows, guarded_by=["tenant_id"])
    (plain,) = upserts(lit, TABLE, rows)
    head = (
        "INSERT INTO `tenants` (`tenant_id`, `name`, `_zs_origin`, `_zs_version`) VALUES (1, 'a', 1, 6), (2, 'b', 1, 7)"
    )
    assert guarded.startswith(head + " ON DUPLICATE KEY UPDATE `name` = IF(") and plain.startswith(head)
    assert "`name` = VALUES(`name`)" in plain and "IF(" not in plain


def test_guarded_deletes_remove_only_rows_older_than_the_delete():
    (one_column,) = guarded_deletes(lit, TABLE, ["tenant_id"], [(1,), (2,)], [6, 9])
    assert one_column == (
        "DELETE `tenants` FROM `tenants` FORCE INDEX (PRIMARY) WHERE "
        "(`tenant_id` = 1 AND `_zs_version` < 6) OR (`tenant_id` = 2 AND `_zs_version` < 9)"
    )
    (composite,) = guarded_deletes(lit, "orders", ["region", "order_id"], [("eu", 7)], [3])
    assert composite.endswith("WHERE (`region` = 'eu' AND `order_id` = 7 AND `_zs_version` < 3)")
    assert len(guarded_deletes(lit, TABLE, ["tenant_id"], [(t,) for t in range(1001)], [5] * 1001)) == 3


# -- the plan of a batch --------------------------------------------------------------------------


def plan(events, targets=None, tombstones=None, copying=True, other_unique_keys=False):
    changes = merge(events)
    result = BatchResult()
    keys = [(c.pk["tenant_id"],) for c in changes]
    writes = plan_writes(
        lit,
        "a",
        TABLE,
        ["tenant_id"],
        changes,
        keys,
        {f"[{t}]": r for t, r in (targets or {}).items()},
        {f"[{t}]": v for t, v in (tombstones or {}).items()},
        {},
        result,
        copying,
        other_unique_keys,
    )
    return writes, result


def test_in_copy_mode_rows_the_target_had_and_lacked_are_guarded_upserts_and_deletes_are_guarded():
    events = [
        ev(10, UPDATE, 1, 6, old=row(1, 5), new=row(1, 6, "lacked")),  # the target lacks row 1
        ev(20, UPDATE, 2, 6, old=row(2, 5), new=row(2, 6, "had")),  # it has row 2, older
        ev(30, DELETE, 3, 6, old=row(3, 5)),  # lacks row 3
        ev(40, DELETE, 4, 6, old=row(4, 5)),  # has row 4, older
        ev(50, UPDATE, 5, 6, old=row(5, 5), new=row(5, 6)),  # has row 5, newer: skipped
    ]
    writes, result = plan(events, targets={2: row(2, 3, "copied"), 4: row(4, 2), 5: row(5, 9)})
    tombstones, delete, had, lacked = writes  # the tombstones ahead of the guarded delete (write_plan.py)
    assert delete.endswith("(`tenant_id` = 3 AND `_zs_version` < 6) OR (`tenant_id` = 4 AND `_zs_version` < 6)")
    assert "(2, 'had', 1, 6)" in had and "IF(VALUES(`_zs_version`) > `_zs_version`" in had
    assert "(1, 'lacked', 1, 6)" in lacked and "IF(VALUES(`_zs_version`) > `_zs_version`" in lacked
    assert "('tenants', '[3]', 6)" in tombstones and "('tenants', '[4]', 6)" in tombstones
    assert (result.applied, result.skipped, result.locked) == (4, 1, [])


def test_in_copy_mode_a_table_with_another_unique_key_inserts_the_rows_the_target_lacked():
    writes, _ = plan([ev(10, UPDATE, 1, 6, old=row(1, 5), new=row(1, 6))], other_unique_keys=True)
    (insert,) = writes
    assert insert.startswith("INSERT INTO `tenants`") and "ON DUPLICATE KEY UPDATE" not in insert


def test_outside_copy_mode_the_same_batch_waits():
    with pytest.raises(WaitForVersions):
        plan([ev(10, UPDATE, 1, 6, old=row(1, 5), new=row(1, 6))], copying=False)
    with pytest.raises(WaitForVersions):
        plan([ev(30, DELETE, 3, 6, old=row(3, 5))], copying=False)
