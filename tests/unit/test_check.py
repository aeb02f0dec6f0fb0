"""The consistency check's pure parts: its request, SQL, chunk comparison and how a
differing key is told (docs/consistency-check.md)."""

from __future__ import annotations

import pytest

from spark_jobs.check_zones import compare, pair_summary
from zonesync.check import diff, sql
from zonesync.check.request import CheckRefused, CheckRequest

pytestmark = pytest.mark.unit

ZONES = {"a": 1, "b": 2, "c": 3}
TABLES = {"tenants": None, "orders": None}


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (CheckRequest(zones=("a", "x")), "zones: unknown zone 'x'; the zones are a, b, c"),
        (CheckRequest(zones=("a",)), "zones: a check compares at least two zones"),
        (CheckRequest(zones=("A",)), "zones: 'A' is not a zone name"),
        (CheckRequest(zones=("a", "a")), "zones: a name is given twice"),
        (CheckRequest(tables=("nope",)), "tables: nope not replicated; the rule set's tables are orders, tenants"),
        (CheckRequest(tables=("x; drop",)), "tables: 'x; drop' is not a plain table name"),
        (CheckRequest(chunk_rows=5), "chunk_rows: 5 is out of range; use 100..10000000"),
        (CheckRequest(chunk_rows=True), "chunk_rows: True is out of range"),
        (CheckRequest(repair=True, rows=False), "repair: needs rows on"),
        (CheckRequest(reason=" "), "reason: say why"),
    ],
)
def test_a_bad_request_is_refused_with_one_line_naming_the_field(req, message):
    with pytest.raises(CheckRefused) as exc:
        req.resolved(ZONES, TABLES)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_an_empty_request_means_every_zone_and_every_replicated_table():
    got = CheckRequest().resolved(ZONES, TABLES)
    assert (got.zones, got.tables) == (("a", "b", "c"), ("orders", "tenants"))


def test_rows_are_hashed_as_the_server_concatenates_them_and_nulls_apart_from_every_value():
    cols = [("v", "varchar"), ("b", "blob"), ("_zs_origin", "smallint"), ("_zs_version", "bigint")]
    text = sql.row_hash(cols)
    # name order, every value as the concatenation renders it, and the NULL bitmap last
    assert text == (
        "CRC32(CONCAT_WS('#', `_zs_origin`, `_zs_version`, `b`, `v`, "
        "CONCAT(ISNULL(`_zs_origin`), ISNULL(`_zs_version`), ISNULL(`b`), ISNULL(`v`))))"
    )
    # the bitmap marks only the nullable columns; none nullable, no bitmap
    assert sql.row_hash(cols, {"b"}).endswith("`v`, CONCAT(ISNULL(`b`))))")
    assert sql.row_hash(cols, set()) == "CRC32(CONCAT_WS('#', `_zs_origin`, `_zs_version`, `b`, `v`))"
    assert sql.canonical("b", "BLOB") == "HEX(`b`)" and sql.canonical("v", "varchar") == "CAST(`v` AS CHAR)"
    q = sql.chunk_checksum("t", cols, ["id"], [10], [20], [3, 1, 2])
    assert "WHERE `id` > 10 AND `id` <= 20" in q and "NOT IN (1, 2, 3)" in q
    with pytest.raises(ValueError, match="lacks the bookkeeping columns _zs_version"):
        sql.chunk_checksum("t", [("v", "varchar"), ("_zs_origin", "smallint")], ["id"], None, None, [1])


def test_a_chunk_matches_only_when_every_zone_has_its_rows_and_checksum():
    assert compare({"a": [3, 77, 1, 0, 0], "b": [3, 77, 5, 0, 0]}) == "match"  # the other numbers are facts only
    assert compare({"a": [3, 77], "b": [3, 78]}) == "differ"
    assert compare({"a": [3, 77], "b": [2, 77]}) == "differ"
    chunks = [{"chunk": 0, "zones": {"a": [1, 1], "b": [1, 1], "c": [1, 2]}},
              {"chunk": 1, "zones": {"a": [1, 5], "b": [1, 6], "c": [1, 5]}}]  # fmt: skip
    pairs = pair_summary(["a", "b", "c"], chunks)
    assert {k: v["differing_chunks"] for k, v in pairs.items()} == {"a-b": [1], "a-c": [0], "b-c": [0, 1]}


def row(v=1, o=1, h=7, **cols):
    return {"_v": v, "_o": o, "_zs_hash": h, "cols": cols}


def test_a_differing_key_names_each_wrong_zone_against_the_owner():
    zones = ["a", "b", "c"]
    rows = {"a": row(name="x", note=""), "b": row(h=8, name="y", note=None)}
    d = diff.describe("[10]", rows, zones, owner="a", zsid=10)
    assert d["right"] == "a" and d["zones"] == {"b": ["name", "note"], "c": "missing"}
    assert d["values"] == {"a": {"name": "x", "note": ""}, "b": {"name": "y", "note": None}}
    # the owner lacks it: the others hold an extra row
    assert diff.describe("[5]", {"b": row()}, zones, owner="c", zsid=904)["zones"] == {"b": "extra"}
    # an origin that differs alone is named
    assert diff.describe("[1]", {"a": row(), "b": row(o=2, h=9), "c": row()}, zones, "a", 1)["zones"] == {
        "b": ["_zs_origin"]
    }
    # no owner among the checked zones: the first zone holding it is the reference, nobody is "right"
    d = diff.describe("[2]", {"b": row(), "c": row(h=3, name="z")}, ["b", "c"], owner="a", zsid=2)
    assert (d["right"], d["reference"], d["zones"]) == (None, "b", {"c": ["name"]})
    assert diff.describe("[3]", {"a": row(), "b": row()}, ["a", "b"], "a", 3) is None


def test_a_difference_a_write_after_the_cut_explains_is_in_flight():
    zones = ["a", "b"]
    assert diff.in_flight({"a": row(v=101), "b": row(v=50)}, zones, cut_us=100, deleted_after_cut=set())
    assert not diff.in_flight({"a": row(v=100), "b": row(v=50)}, zones, cut_us=100, deleted_after_cut=set())
    # b lacks the row because it deleted it after the cut (a has not applied the delete yet)
    assert diff.in_flight({"a": row(v=50)}, zones, cut_us=100, deleted_after_cut={"b"})
    # a tombstone in the zone that holds the row explains nothing
    assert not diff.in_flight({"a": row(v=50)}, zones, cut_us=100, deleted_after_cut={"a"})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--zones", "A,b"], "zonesync check: --zones: 'A' is not a zone name"),
        (["check", "--tables", "x y"], "zonesync check: --tables: 'x y' is not a plain table name"),
        (["check", "--chunk-rows", "5"], "zonesync check: --chunk-rows: 5 is out of range"),
        (["check", "--repair", "--no-rows"], "zonesync check: --repair: needs rows on"),
        (["check", "--parallel", "0"], "zonesync check: --parallel: 0 is out of range; use 1..256"),
        (["check", "frobnicate"], "zonesync check: unknown arguments 'frobnicate'"),
    ],
)
def test_the_command_refuses_bad_arguments_with_one_line_and_triggers_nothing(argv, message, capsys, monkeypatch):
    from zonesync import cli
    from zonesync.cli import common

    monkeypatch.setattr(common, "run_dag", lambda *a, **k: pytest.fail("nothing may be triggered"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_great_expectations_is_imported_without_the_modules_only_an_unused_expectation_needs():
    """check_expectations.import_gx: scipy.stats and altair (GX's KL-divergence expectation,
    a third of its import) stay unloaded until used, and work when used."""
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import sys\n"
        "from spark_jobs.check_expectations import import_gx\n"
        "gx = import_gx()\n"
        "assert gx.ExpectationSuite is not None\n"
        "print(sorted(m for m in ('scipy.stats._stats_py', 'altair.vegalite') if m in sys.modules))\n"
        "from scipy import stats\n"
        "import altair\n"
        "print(round(float(stats.entropy([0.5, 0.5], [0.25, 0.75])), 4), altair.Chart.__name__)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "0.1438 Chart"], out.stdout
