"""The consistency check's Spark job against real zones (docs/consistency-check.md):
every injected difference found, in the right row, with the right zone named; nothing
that is equal reported; a difference a later write explains left out; a job stopped
mid-way resumed from the chunks it finished."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_jobs import check_rows, consistency_check
from tests.integration.check.conftest import TABLE, context, job_args, sql
from zonesync.check import steps
from zonesync.check.store import CheckStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# id -> (the zone that is right: the owner of tenant id % 1024, what each wrong zone has)
EXPECTED = {
    "[10]": ("a", {"b": ["name"]}),  # a changed value
    "[500]": ("b", {"c": "missing"}),  # a deleted row
    "[5000]": ("c", {"a": "extra"}),  # an extra row (tenant 904, c's)
    "[20]": ("a", {"b": ["note"]}),  # NULL vs ''
    "[30]": ("a", {"c": ["name"]}),  # a trailing space
    "[40]": ("a", {"b": ["at_dt"]}),  # a DATETIME an hour off
    "[41]": ("a", {"c": ["at_ts"]}),  # a TIMESTAMP written as local time in +02:00: another instant
    "[50]": ("a", {"b": ["amount"]}),  # the DECIMAL's last digit of scale
    "[60]": ("a", {"c": ["blob_v"]}),  # one BLOB byte (invalid UTF-8 on both sides)
    "[70]": ("a", {"b": ["_zs_origin"]}),  # the origin alone
}


def inject(zones) -> None:
    a, b, c = zones["a"], zones["b"], zones["c"]
    sql(b, "UPDATE check_types SET name = 'changed' WHERE id = 10", "UPDATE check_types SET note = NULL WHERE id = 20",
        "UPDATE check_types SET at_dt = '2026-01-01 11:00:00' WHERE id = 40",
        "UPDATE check_types SET amount = amount + 0.001 WHERE id = 50",
        "UPDATE check_types SET _zs_origin = 2 WHERE id = 70",
        # the same instant written as local time in another zone: equal, not reported
        "SET time_zone = '+02:00'", "UPDATE check_types SET at_ts = '2026-01-01 12:00:00' WHERE id = 42")  # fmt: skip
    sql(c, "DELETE FROM check_types WHERE id = 500", "UPDATE check_types SET name = 'name 30 ' WHERE id = 30",
        "UPDATE check_types SET blob_v = UNHEX(CONCAT('00FE', HEX(60))) WHERE id = 60",
        "SET time_zone = '+02:00'", "UPDATE check_types SET at_ts = '2026-01-01 10:00:00' WHERE id = 41")  # fmt: skip
    sql(a, "INSERT INTO check_types (id, tenant_id, name, note, _zs_origin, _zs_version) "
           "VALUES (5000, 904, 'only in a', '', 3, 6000)")  # fmt: skip
    # written after the check's cut (its version is the writer's clock): in flight, not reported;
    # an hour ahead, so it stays after the cut of every check a test runs after it, however
    # slow the machine (10 s ahead, a repair test's second check reported it on a slow day)
    late = int(time.time() * 1_000_000) + 3_600_000_000
    sql(b, f"UPDATE check_types SET name = 'late', _zs_version = {late} WHERE id = 80")


def test_every_injected_difference_is_found_with_the_zone_that_is_right(spark, zones, meta, types_table, tmp_path):
    types_table(3000)
    ctx = context(meta, zones, "chk-diffs")
    steps.preflight(ctx)
    steps.record_start(ctx)
    inject(zones)
    result = consistency_check.run(spark, job_args(meta, zones, tmp_path, "chk-diffs"))
    run = steps.finish(ctx, result)

    found = {d["key"]: (d["right"], d["zones"]) for d in CheckStore(meta).diffs("chk-diffs")}
    assert found == EXPECTED
    table = result["tables"][TABLE]
    assert table["rows"] == {"a": 3001, "b": 3000, "c": 2999}
    assert table["outcome"]["complete"] and table["outcome"]["chunks"] == 7
    # only the differing chunks' sub-ranges whose numbers differ are read (not their 1000 keys)
    narrowed = table["outcome"]["narrowed"]
    assert narrowed["chunks"] == 2 and narrowed["keys"] < 150, narrowed
    # the chunk holding only id 80's late write differs by checksum, and settles
    statuses = {c["chunk"]: c["status"] for c in CheckStore(meta).chunks("chk-diffs", TABLE)}
    assert statuses[0] == "mismatch" and statuses[6] == "mismatch"  # ids 1..500; 3001.. (5000)
    assert table["bookkeeping"]["a"] == {"min_version": 1001, "unknown_origin": 0}
    assert run.status == "differences" and "10 rows differ" in run.detail
    failed = {(f["expectation"], f["column"]) for f in result["expectations"]["failed"]}
    assert failed == {("expect_column_values_to_be_in_set", "status"),
                      ("expect_column_values_to_be_in_set", "counts_equal")}  # fmt: skip
    alerts, _ = meta.run("SELECT kind, detail FROM alerts WHERE kind = 'consistency_mismatch' ORDER BY id DESC LIMIT 1")
    assert alerts and "chk-diffs" in alerts[0][1]
    values = {d["key"]: d["values"] for d in CheckStore(meta).diffs("chk-diffs")}
    assert values["[20]"] == {"a": {"note": ""}, "b": {"note": None}}
    assert values["[30]"] == {"a": {"name": "name 30"}, "c": {"name": "name 30 "}}
    assert values["[60]"] == {"a": {"blob_v": "00FF3C"}, "c": {"blob_v": "00FE3C"}}


def test_equal_zones_pass_and_a_stopped_check_resumes_from_its_finished_chunks(spark, zones, meta, types_table,
                                                                              tmp_path):  # fmt: skip
    types_table(3000)
    ctx = context(meta, zones, "chk-resume")
    steps.preflight(ctx)
    steps.record_start(ctx)
    with pytest.raises(SystemExit, match="stopped after 1 waves"):
        consistency_check.run(spark, job_args(meta, zones, tmp_path, "chk-resume", parallel=2, stop_after=1))
    first = {c["chunk"]: c["done_at"] for c in CheckStore(meta).chunks("chk-resume", TABLE) if c["done_at"]}
    assert sorted(first) == [0, 1]
    sql(zones["c"], "UPDATE check_types SET name = 'changed after the stop' WHERE id = 2500")
    result = consistency_check.run(spark, job_args(meta, zones, tmp_path, "chk-resume", parallel=2))
    chunks = CheckStore(meta).chunks("chk-resume", TABLE)
    assert {c["chunk"]: c["done_at"] for c in chunks if c["chunk"] in first} == first  # not looked at again
    assert [c["status"] for c in chunks].count("match") == 6
    assert [d["key"] for d in CheckStore(meta).diffs("chk-resume")] == ["[2500]"]
    assert result["tables"][TABLE]["outcome"]["complete"]

    clean = context(meta, zones, "chk-clean")
    sql(zones["c"], "UPDATE check_types SET name = 'name 2500' WHERE id = 2500")
    steps.preflight(clean)
    steps.record_start(clean)
    done = steps.finish(clean, consistency_check.run(spark, job_args(meta, zones, tmp_path, "chk-clean")))
    assert done.status == "succeeded" and CheckStore(meta).diffs("chk-clean") == []
    gx = done.summary["_expectations"]
    assert gx["success"] and gx["failed"] == []
    assert done.summary["_reconcile"] == {}  # no replication ran here: no partition to reconcile
    site = Path(gx["data_docs"].removeprefix("file://"))
    assert site.name == "index.html" and site.exists()
    assert any("chk-clean" in str(p) for p in site.parent.rglob("*.html"))  # this run's validation page


def test_differing_keys_keeps_only_keys_not_alike_everywhere(spark):
    cols = "id long, _zone string, _v long, _o int, _zs_hash long, c_name string"
    df = spark.createDataFrame(
        [(1, "a", 5, 1, 10, "x"), (1, "b", 5, 1, 10, "x"),  # alike in both
         (2, "a", 5, 1, 11, "x"), (2, "b", 5, 1, 12, "y"),  # differs
         (3, "b", 5, 1, 13, "z")],  # only in b
        cols,
    )  # fmt: skip
    row_type = "struct<_zone:string,_v:bigint,_o:int,_zs_hash:bigint,c_name:string>"
    expected = spark.createDataFrame(
        [(2, [("a", 5, 1, 11, "x"), ("b", 5, 1, 12, "y")]), (3, [("b", 5, 1, 13, "z")])],
        f"id long, rows array<{row_type}>",
    )
    got = check_rows.differing_keys(df, ["id"], zone_count=2)
    assertDataFrameEqual(got, expected)
    pk, rows = check_rows.as_rows(got.where("id = 2").collect()[0], ["id"])
    assert pk == {"id": 2} and rows["b"] == {"_v": 5, "_o": 1, "_zs_hash": 12, "cols": {"name": "y"}}


@pytest.mark.parametrize(
    "spec",
    [
        {"column": "v", "function": "modulo", "buckets": 1024},
        {"column": "v", "function": "map", "map": {"-3": 5, "7": 40, "1500": 1000}},
        {"column": "v", "function": "range", "ranges": [{"lo": -10, "hi": 99, "zsid": 5},
                                                         {"lo": 100, "hi": 5000, "zsid": 600}]},
    ],
    ids=["modulo", "map", "range"],
)  # fmt: skip
def test_a_zone_picks_the_rows_of_some_zsids_as_the_guard_computes_them(zones, spec):
    """zsid_predicate in MariaDB against rules.extract.zsid_of in Python, negative values
    and NULL included: the switch's verify compares exactly the moved ZSIDs' rows."""
    from tests.support.rules import rules_doc
    from zonesync.check.sql import zsid_predicate
    from zonesync.rules.extract import ZsidUnknown, zsid_of

    rules = rules_doc(tables={"zsid_probe": spec})
    table = rules.tables["zsid_probe"]
    spans = [(0, 9), (40, 700)]
    got = sql(zones["a"], "CREATE TEMPORARY TABLE zsid_probe (v BIGINT NULL)",
              "INSERT INTO zsid_probe SELECT CAST(seq AS SIGNED) - 1100 FROM seq_0_to_3300",
              "INSERT INTO zsid_probe VALUES (NULL)",
              f"SELECT v FROM zsid_probe WHERE {zsid_predicate(table, rules.zsid_min, spans)}", fetch=True)  # fmt: skip

    def moved(v):
        try:
            return any(lo <= zsid_of(table, {"v": v}, rules.zsid_min) <= hi for lo, hi in spans)
        except ZsidUnknown:
            return False

    expected = sorted(v for v in range(-1100, 2201) if moved(v))
    assert expected and sorted(v for (v,) in got) == expected
