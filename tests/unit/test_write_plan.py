"""One table's net changes against what the target holds, as write statements
(apply/batch/write_plan.py's plan_writes), without a server: the target rows, tombstones
and locks are given, the statements read back as text.

The rules (its docstring): rows the target has are upserted, rows it lacks are plain
INSERTs (never upserts: ON DUPLICATE KEY UPDATE would rewrite whichever row holds a
conflicting unique value); deletes go first, then updates, then inserts, then the
tombstones; a skipped change writes nothing (a locked row's counts its held events); a
lock writes the lock row and alerts; a change that must wait for another source raises
WaitForVersions before anything is returned. The batch's counts follow each decision.
"""

from __future__ import annotations

import pytest

from tests.support.events import change_event, sql_lit, tenant_event, tenant_row
from zonesync.apply.batch.batch_result import BatchResult
from zonesync.apply.batch.merge import merge
from zonesync.apply.batch.write_plan import plan_writes
from zonesync.apply.errors import WaitForVersions
from zonesync.events import DELETE, INSERT, UPDATE

pytestmark = pytest.mark.unit

TABLE = "tenants"


lit, row, ev = sql_lit, tenant_row, tenant_event


def plan(events, targets=None, tombstones=None, locks=None):
    """(statements, the batch's result) for these events of one partition, in order."""
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
        {f"[{t}]": 1 for t in (locks or ())},
        result,
    )
    return writes, result


def kinds(writes: list[str]) -> list[str]:
    """Each statement's kind, in order."""
    out = []
    for w in writes:
        if w.startswith("DELETE "):
            out.append("delete")
        elif "zonesync.tombstones" in w:
            out.append("tombstones")
        elif "zonesync.row_locks" in w:
            out.append("lock" if w.startswith("INSERT") else "held")
        elif "ON DUPLICATE KEY UPDATE" in w:
            out.append("upsert")
        else:
            out.append("insert")
    return out


def test_a_row_the_target_lacks_is_inserted_and_one_it_has_is_upserted():
    writes, result = plan(
        [ev(10, INSERT, 1, 1, new=row(1, 1)), ev(20, UPDATE, 2, 6, old=row(2, 5), new=row(2, 6, "y"))],
        targets={2: row(2, 5)},
    )
    assert kinds(writes) == ["upsert", "insert"]
    upsert, insert = writes
    assert insert.startswith("INSERT INTO `tenants`") and "(1, 'x', 1, 1)" in insert
    assert "ON DUPLICATE KEY UPDATE" not in insert
    assert "(2, 'y', 1, 6)" in upsert, "the event's origin and version are written with the row"
    assert (result.applied, result.skipped, result.locked) == (2, 0, [])


def test_deletes_go_first_then_updates_then_inserts_then_tombstones():
    writes, result = plan(
        [
            ev(10, INSERT, 3, 1, new=row(3, 1)),
            ev(20, UPDATE, 2, 6, old=row(2, 5), new=row(2, 6, "y")),
            ev(30, DELETE, 1, 8, old=row(1, 7)),
        ],
        targets={1: row(1, 7), 2: row(2, 5)},
    )
    assert kinds(writes) == ["delete", "upsert", "insert", "tombstones"]
    assert writes[0] == "DELETE `tenants` FROM `tenants` FORCE INDEX (PRIMARY) WHERE `tenant_id` IN (1)"
    assert "('tenants', '[1]', 8)" in writes[3], "the tombstone carries the delete's version"
    assert result.applied == 3


def test_deletes_are_one_statement_for_the_table():
    events = [ev(10 + t, DELETE, t, 3, old=row(t, 2)) for t in (1, 2, 3)]
    writes, _ = plan(events, targets={t: row(t, 2) for t in (1, 2, 3)})
    assert kinds(writes) == ["delete", "tombstones"]
    assert writes[0].endswith("WHERE `tenant_id` IN (1, 2, 3)")
    assert all(f"('tenants', '[{t}]', 3)" in writes[1] for t in (1, 2, 3))


def test_an_insert_and_delete_of_a_row_the_target_never_had_leave_only_a_tombstone():
    writes, result = plan([ev(10, INSERT, 1, 1, new=row(1, 1)), ev(20, DELETE, 1, 2, old=row(1, 1))])
    assert kinds(writes) == ["tombstones"]
    assert "('tenants', '[1]', 2)" in writes[0]
    assert result.applied == 2


def test_a_replayed_change_is_skipped_and_writes_nothing():
    writes, result = plan([ev(20, UPDATE, 1, 6, old=row(1, 5), new=row(1, 6))], targets={1: row(1, 6)})
    assert writes == []
    assert (result.applied, result.skipped) == (0, 1)


def test_a_change_of_a_locked_row_is_held_and_counted_in_its_lock():
    events = [ev(20, UPDATE, 1, 6, old=row(1, 5), new=row(1, 6)), ev(30, UPDATE, 1, 7, old=row(1, 6), new=row(1, 7))]
    writes, result = plan(events, targets={1: row(1, 5)}, locks={1})
    assert kinds(writes) == ["held"]
    assert "held_events = held_events + 2" in writes[0] and "pk = '[1]'" in writes[0]
    assert (result.applied, result.skipped, result.locked) == (0, 2, [])


def test_a_row_changed_behind_the_appliers_back_is_locked_and_alerted():
    behind_its_back = row(1, 5, name="changed here")
    writes, result = plan([ev(20, UPDATE, 1, 6, old=row(1, 5), new=row(1, 6))], targets={1: behind_its_back})
    assert kinds(writes) == ["lock"]
    assert writes[0].startswith("INSERT INTO zonesync.row_locks") and "'[1]'" in writes[0]
    assert result.skipped == 1 and result.applied == 0
    ((source, table, pk, reason),) = result.locked
    assert (source, table, pk) == ("a", TABLE, "[1]") and reason


def test_a_change_ahead_of_the_target_waits_for_the_versions_between():
    with pytest.raises(WaitForVersions, match=r"tenants \[1\]"):
        plan([ev(20, UPDATE, 1, 9, old=row(1, 8), new=row(1, 9))], targets={1: row(1, 5)})
    with pytest.raises(WaitForVersions):  # a row the target does not have yet
        plan([ev(20, DELETE, 1, 9, old=row(1, 8))])


def test_one_waiting_change_raises_even_after_others_were_planned():
    events = [ev(10, INSERT, 1, 1, new=row(1, 1)), ev(20, UPDATE, 2, 9, old=row(2, 8), new=row(2, 9))]
    changes = merge(events)
    with pytest.raises(WaitForVersions):
        plan_writes(lit, "a", TABLE, ["tenant_id"], changes, [(1,), (2,)], {"[2]": row(2, 5)}, {}, {}, BatchResult())


def test_keys_must_match_the_changes_one_for_one():
    changes = merge([ev(10, INSERT, 1, 1, new=row(1, 1)), ev(20, INSERT, 2, 1, new=row(2, 1))])
    with pytest.raises(ValueError):
        plan_writes(lit, "a", TABLE, ["tenant_id"], changes, [(1,)], {}, {}, {}, BatchResult())


def test_a_composite_key_deletes_by_each_column():
    old = {"region": "eu", "order_id": 7, "_zs_origin": 1, "_zs_version": 2}
    event = change_event(lsn=10, op=DELETE, table="orders", pk={"region": "eu", "order_id": 7}, version=3, old=old)
    changes = merge([event])
    targets = {changes[0].pk_text: old}
    keys = [("eu", 7)]
    writes = plan_writes(lit, "a", "orders", ["region", "order_id"], changes, keys, targets, {}, {}, BatchResult())
    assert writes[0].endswith("WHERE (`region` = 'eu' AND `order_id` = 7)")
