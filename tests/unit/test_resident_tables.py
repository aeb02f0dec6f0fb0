"""Resident tables, the pure parts: their declaration, what the check and the copy refuse,
the stock copy's predicate and arguments, and which rows an applier keeps."""

from __future__ import annotations

import copy
import json

import pytest

from spark_jobs.full_copy import parse_args
from tests.support.resident import resident_rules
from tests.support.rules import BASE
from zonesync.apply.batch.resident import ResidentGate, resident_tables
from zonesync.check.request import CheckRefused, CheckRequest
from zonesync.copy.merge import select_statement, upsert_statement
from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync.events import ChangeEvent
from zonesync.migrate import resident
from zonesync.rules import RuleSetError, parse

pytestmark = pytest.mark.unit

ZONES = {"a": 1, "b": 2, "c": 3}


def test_a_resident_table_is_declared_with_its_entity_and_round_trips():
    rules = resident_rules()
    assert set(rules.resident_tables()) == {"notes"} and set(rules.replicated_tables()) == {"orders", "tenants"}
    assert parse(rules.to_doc()) == rules and rules.to_doc()["tables"]["notes"]["resident"] is True
    doc = copy.deepcopy(BASE)
    doc["tables"]["notes"] = {"column": "tenant_id", "function": "modulo", "buckets": 1024, "resident": True}
    with pytest.raises(RuleSetError, match=r"tables\.notes: 'entity' is a required property"):
        parse(doc)
    doc["tables"]["notes"]["resident"] = "yes"
    with pytest.raises(RuleSetError, match=r"tables\.notes\.resident: 'yes' is not of type 'boolean'"):
        parse(doc)


def test_replace_key_is_declared_on_a_resident_table_and_round_trips():
    """need-replace-pk (S004-35): `replace_key` only on a resident table; the stock copy's
    spec names the run whose key map its rows land through; the verify's check leaves the
    table to the final check (its moved rows have other keys in the target)."""
    doc = resident_rules().to_doc()
    doc["tables"]["notes"]["replace_key"] = True
    rules = parse(doc)
    assert rules.tables["notes"].replace_key and parse(rules.to_doc()) == rules
    assert resident.stock_spec(rules, {"notes": "x"}, "run-7") == {
        "notes": {"where": "x", "entity": "tenant_id", "replace_key": "run-7"}
    }
    assert resident_tables(rules) == {"notes": ("tenant", "tenant_id", True)}
    request = CheckRequest(zones=("a", "b"), entities=(("tenant", ("7",)),)).resolved({"a", "b"}, rules.tables)
    assert "notes" not in request.tables and "orders" in request.tables
    del doc["tables"]["notes"]["resident"]
    with pytest.raises(RuleSetError, match=r"tables\.notes: 'resident' is a required property"):
        parse(doc)
    doc["tables"]["notes"]["resident"] = False
    with pytest.raises(RuleSetError, match=r"tables\.notes\.resident: True was expected"):
        parse(doc)


def test_the_check_leaves_resident_tables_out_unless_it_compares_one_entity_s_rows():
    tables = resident_rules().tables
    assert CheckRequest().resolved(ZONES, tables).tables == ("orders", "tenants")
    with pytest.raises(CheckRefused, match=r"^tables: notes resident \(rows live only in their entity's unit"):
        CheckRequest(tables=("notes",)).resolved(ZONES, tables)
    verify = CheckRequest(zones=("a", "b"), entities=(("tenant", ("7",)),)).resolved(ZONES, tables)
    assert verify.tables == ("notes", "orders")


def test_the_full_copy_refuses_a_resident_table_and_copies_the_rest():
    tables = resident_rules().tables
    req = CopyRequest("a", "b", (), "rebuild", "disk loss", 1000)
    assert req.resolved(ZONES, tables).tables == ("orders", "tenants")
    with pytest.raises(CopyRefused, match="^tables: notes resident"):
        CopyRequest("a", "b", ("notes",), "rebuild", "disk loss", 1000).resolved(ZONES, tables)


def test_the_stock_copy_reads_only_the_entities_rows():
    predicates = resident.tables(resident_rules(), {"tenant": ["7", "9"]})
    assert predicates == {"notes": "(`tenant_id` IS NOT NULL AND `tenant_id` IN ('7', '9'))"}
    assert resident.tables(resident_rules(), {"chat": ["70"]}) == {}
    sql = select_statement("app", "notes", ["note_id", "tenant_id", "_zs_version"], ["note_id"], [1], [100],
                           predicates["notes"])  # fmt: skip
    assert sql.endswith("AND (`tenant_id` IS NOT NULL AND `tenant_id` IN ('7', '9'))"), sql
    spec = resident.stock_spec(resident_rules(), predicates)
    assert spec == {"notes": {"where": predicates["notes"], "entity": "tenant_id"}}
    args = parse_args(["--run-id", "r.stock", "--source", "a", "--target", "b", "--table", "notes", "--output", "/x",
                       "--zone", "a=jdbc:mysql://h/db", "--where-json", json.dumps(spec)])  # fmt: skip
    assert args.where == spec


def test_the_stock_copy_never_overwrites_another_entitys_row_with_its_key():
    """S004-36 in the stock copy: its upsert replaces a target row only when it is newer and
    of the same entity (MySQL's <=>: NULLs compare equal); the version too."""
    sql = upsert_statement("app", "notes", ["note_id", "tenant_id", "body", "_zs_version"], "tenant_id")
    same = "VALUES(`_zs_version`) > `_zs_version` AND `tenant_id` <=> VALUES(`tenant_id`)"
    assert f"`body` = IF({same}, VALUES(`body`), `body`)" in sql
    assert sql.endswith("`_zs_version` = IF(TRUE AND `tenant_id` <=> VALUES(`tenant_id`), "
                        "GREATEST(`_zs_version`, VALUES(`_zs_version`)), `_zs_version`)"), sql  # fmt: skip
    assert "<=>" not in upsert_statement("app", "notes", ["note_id", "body", "_zs_version"])  # the full copy's


def test_a_stock_copy_of_a_table_with_other_unique_keys_changes_only_the_copied_row():
    """S004-10: with unique keys besides the primary key, every copied row lands through the
    upsert, which changes a row it meets only if that is the same row (its key too), and
    leaves an update that would meet a third row (IGNORE): a row of its own entity still
    holding a value the source moved on from, which the stream moves."""
    cols = ["note_id", "tenant_id", "slug", "_zs_version"]
    sql = upsert_statement("app", "notes", cols, "tenant_id", ["note_id"])
    assert sql.startswith("INSERT IGNORE INTO `app`.`notes`"), sql
    same = (
        "VALUES(`_zs_version`) > `_zs_version` AND `tenant_id` <=> VALUES(`tenant_id`) "
        "AND `note_id` <=> VALUES(`note_id`)"
    )
    assert f"`slug` = IF({same}, VALUES(`slug`), `slug`)" in sql, sql
    assert upsert_statement("app", "notes", cols, "tenant_id").startswith("INSERT INTO")  # without other unique keys


def test_an_applier_locks_an_admitted_row_that_meets_another_entitys_row_with_its_key():
    """S004-36 in the stream: in copy mode a resident row is decided by version alone, but a
    target row of another entity with the same key is locked, never overwritten; the same
    entity's older row is upserted as before."""
    from tests.support.events import change_event
    from zonesync.apply.batch.decide import LOCK, UPSERT, decide
    from zonesync.apply.batch.merge import merge

    def note(tenant: int, version: int) -> dict:
        return {"note_id": 5, "tenant_id": tenant, "body": "x", "_zs_origin": 1, "_zs_version": version}

    (insert,) = merge([change_event(lsn=1, op="insert", table="notes", pk={"note_id": 5}, version=9, new=note(7, 9))])
    other = decide(insert, note(9, 3), None, False, True, "tenant_id")
    assert other.kind == LOCK and "belongs to another entity (tenant_id 9, the change's 7)" in other.reason
    assert decide(insert, note(7, 3), None, False, True, "tenant_id").kind == UPSERT
    assert decide(insert, note(9, 3), None, False, True).kind == UPSERT  # (a full copy's table: version alone)


@pytest.mark.parametrize("where", ["{not json", '["a"]', '{"notes": ""}', '{"notes": {"where": "x"}}'])
def test_bad_stock_predicates_are_refused(where, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--run-id", "r", "--source", "a", "--target", "b", "--table", "notes", "--output", "/x",
                    "--where-json", where])  # fmt: skip
    assert "--where-json" in capsys.readouterr().err


def _event(table: str, new: dict | None, old: dict | None = None) -> ChangeEvent:
    op = "insert" if old is None else ("delete" if new is None else "update")
    return ChangeEvent(lsn=1, prev_lsn=0, source_zone="a", origin_zone=1, table=table, pk={"note_id": 1}, op=op,
                       old=old, new=new, version=1, txn_id="t", row_index=0, row_count=1, commit_ts=0,
                       partition=0)  # fmt: skip


def test_an_applier_keeps_a_resident_row_only_for_an_entity_admitted_from_its_source():
    gate = ResidentGate()
    gate.tables = resident_tables(resident_rules())
    assert gate.tables == {"notes": ("tenant", "tenant_id", False)}
    gate._admitted = {("a", "tenant", "7"): "run-7"}
    assert gate.admits("a", _event("notes", {"note_id": 1, "tenant_id": 7})) == "run-7"
    assert gate.admits("a", _event("notes", {"note_id": 1, "tenant_id": 7}))
    assert gate.admits("a", _event("notes", None, {"note_id": 1, "tenant_id": 7}))  # a delete: its old row
    assert not gate.admits("a", _event("notes", {"note_id": 1, "tenant_id": 8}))
    assert not gate.admits("c", _event("notes", {"note_id": 1, "tenant_id": 7}))  # admitted from a only
