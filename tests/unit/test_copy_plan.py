"""Full copy, pure parts: requests refused field by field, where each partition of the
target goes, the chunk predicates, and the merge statement's guards."""

from __future__ import annotations

import pytest

from zonesync.copy.chunks import literal, predicate
from zonesync.copy.merge import merge_statement, pk_text_sql, stage_name
from zonesync.copy.positions import moved
from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync.events import pk_text

pytestmark = pytest.mark.unit

ZONES = {"a": 1, "b": 2, "c": 3}
TABLES = {"tenants": None, "orders": None}


def req(**kw) -> CopyRequest:
    base = dict(source_zone="a", target_zone="b", tables=(), mode="rebuild", reason="disk loss", chunk_rows=1000)
    return CopyRequest(**{**base, **kw})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(target_zone="a"), "to: the target is the source"),
        (dict(source_zone="x"), "from: unknown zone 'x'"),
        (dict(target_zone="d"), "to: unknown zone 'd'"),
        (dict(source_zone="A;drop"), "from: 'A;drop' is not a zone name"),
        (dict(tables=("users",)), "tables: users not replicated"),
        (dict(tables=("tenants", "tenants")), "tables: a table is named twice"),
        (dict(mode="fast"), "mode: 'fast' is not one of"),
        (dict(reason="  "), "reason: say why"),
        (dict(chunk_rows=5), "chunk_rows: 5 is out of range"),
    ],
)
def test_a_bad_request_is_refused_naming_its_field(change, field):
    with pytest.raises(CopyRefused, match="^" + field.replace("(", r"\(")):
        req(**change).resolved(ZONES, TABLES)


def test_no_tables_means_every_replicated_table():
    assert req().resolved(ZONES, TABLES).tables == ("orders", "tenants")
    assert req(tables=("tenants",)).resolved(ZONES, TABLES).tables == ("tenants",)


@pytest.mark.parametrize(
    ("source", "current", "start", "expected"),
    [
        ("c", (50, 9, "running"), (80, 12), (50, 9)),  # behind the start: replays from where it stands
        ("c", (90, 15, "running"), (80, 12), (80, 12)),  # ahead: back to the start (its rows may be lost)
        ("c", (90, 15, "halted"), (80, 12), (80, 12)),  # halted: from the start, the gap behind it copied
        ("c", None, (80, 12), (80, 12)),  # never ran (a new zone): from the start
        ("a", (90, 15, "running"), (80, 12), (90, 15)),  # the copy's source: below the tail it read after
        ("a", (90, 15, "halted"), (120, 30), (120, 30)),  # the source's halted stream: jumps to the tail
    ],
)
def test_where_each_partition_of_the_target_goes(source, current, start, expected):
    assert moved(source, "a", current, start) == expected


def test_chunk_predicates_cover_the_key_space_without_overlap():
    assert predicate(["id"], None, [10]) == "`id` <= 10"
    assert predicate(["id"], [10], None) == "`id` > 10"
    assert predicate(["a", "b"], [1, 2], [3, 4]) == "(`a`, `b`) > (1, 2) AND (`a`, `b`) <= (3, 4)"
    assert predicate(["id"], None, None) == "1 = 1"
    assert literal([7]) == "7"


def test_the_merge_statement_guards_by_version_and_tombstone():
    sql = merge_statement("app", "tenants", "stg", ["tenant_id", "name", "_zs_origin", "_zs_version"], ["tenant_id"], 3)
    assert "WHERE s.`_zs_chunk` = 3" in sql
    assert "tb.version >= s.`_zs_version`" in sql
    # every column only when the staged row is newer, and the version last
    assert "`app`.`tenants`.`name` = IF(VALUES(`_zs_version`) > `app`.`tenants`.`_zs_version`" in sql
    t = "`app`.`tenants`"
    assert sql.endswith(f"{t}.`_zs_version` = GREATEST({t}.`_zs_version`, VALUES(`_zs_version`))")


@pytest.mark.parametrize("key", [{"id": 5}, {"b": 2, "a": -1}, {"z": 10, "m": 20, "a": 30}])
def test_the_sql_key_text_is_the_tombstones_key_text(key):
    """The merge looks tombstones up by the text the applier keys them with (events.pk_text)."""
    sql = pk_text_sql("s", list(key))
    text = sql
    for c in key:
        text = text.replace(f"s.`{c}`", str(key[c]))
    pieces = text[len("CONCAT(") : -1].split(", ")
    assert "".join(p.strip("'") for p in pieces) == pk_text(key)


def test_stage_names_are_short_and_stable():
    assert stage_name("r1", "tenants") == stage_name("r1", "tenants") != stage_name("r2", "tenants")
    assert len(stage_name("x" * 250, "t" * 64)) <= 64


@pytest.mark.parametrize(
    ("src", "dst", "src_deleted", "dst_deleted", "real"),
    [
        ({"[1]": (5, 11)}, {"[1]": (5, 11)}, set(), set(), []),  # equal
        ({"[1]": (5, 11)}, {"[1]": (5, 12)}, set(), set(), ["[1]"]),  # same version, other content: real
        ({"[1]": (5, 11)}, {}, set(), set(), ["[1]"]),  # the target lacks a settled row: real
        ({}, {"[1]": (5, 11)}, set(), set(), ["[1]"]),  # the target holds a row the source lacks: real
        ({"[1]": (150, 11)}, {"[1]": (5, 11)}, set(), set(), []),  # updated after the cut: in flight
        ({"[1]": (5, 11)}, {"[1]": (150, 11)}, set(), set(), []),  # updated in the target after the cut
        ({"[1]": (5, 11)}, {}, set(), {"[1]"}, []),  # the target deleted it after the cut
        ({}, {"[1]": (5, 11)}, {"[1]"}, set(), []),  # the source deleted it after the cut
        ({}, {"[1]": (5, 11)}, set(), {"[1]"}, ["[1]"]),  # deleted in the target only: no excuse for the source
    ],
)
def test_verify_counts_only_differences_no_write_in_flight_explains(src, dst, src_deleted, dst_deleted, real):
    from zonesync.copy.verify import real_differences

    assert real_differences(src, dst, src_deleted, dst_deleted, cut=100) == real


def test_a_chunk_merge_chosen_as_a_deadlock_victim_is_merged_again(monkeypatch):
    import pymysql

    from zonesync.copy import merge as merge_mod

    calls = []

    def flaky(*args):
        calls.append(args[-1])
        if len(calls) < 3:
            raise pymysql.err.OperationalError(1213 if len(calls) == 1 else 1205, "deadlock / lock wait")
        return 42

    monkeypatch.setattr(merge_mod, "merge_chunk", flaky)
    monkeypatch.setattr("time.sleep", lambda s: None)
    assert merge_mod.merge_chunk_retrying(None, "app", "r", "t", "s", [], [], 7) == 42 and calls == [7, 7, 7]

    def broken(*args):
        raise pymysql.err.OperationalError(1146, "table missing")

    monkeypatch.setattr(merge_mod, "merge_chunk", broken)
    with pytest.raises(pymysql.err.OperationalError, match="table missing"):
        merge_mod.merge_chunk_retrying(None, "app", "r", "t", "s", [], [], 7)


def test_progress_gives_the_rate_and_what_is_left():
    import datetime as dt

    from zonesync.copy.steps import summarize

    t0 = dt.datetime(2026, 1, 1, 12, 0, 0)

    def chunk(n, status, rows=0, at=None):
        return {"table": "tenants", "chunk": n, "status": status, "rows_read": rows, "done_at": at}

    rows = [chunk(0, "done", 1000, t0), chunk(1, "done", 1000, t0 + dt.timedelta(seconds=1)),
            chunk(2, "done", 1000, t0 + dt.timedelta(seconds=2)), chunk(3, "pending"), chunk(4, "pending")]  # fmt: skip
    p = summarize(("tenants", "orders"), rows)["tenants"]
    assert (p["chunks"], p["done"], p["rows"]) == (5, 3, 3000)
    assert p["rate"] == 1500.0 and p["eta_s"] == pytest.approx(2000 / 1500)
    assert summarize(("orders",), [])["orders"] == {"chunks": 0, "done": 0, "rows": 0, "first": None, "last": None,
                                                   "rate": None, "eta_s": None}  # fmt: skip
