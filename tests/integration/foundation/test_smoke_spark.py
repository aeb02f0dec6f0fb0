"""Spark reads a zone table over JDBC in parallel key ranges; the transform is exact."""

from __future__ import annotations

import argparse

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_jobs.common import read_table_partitioned, zone_props
from spark_jobs.zone_inventory import extract, summarize

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def orders(zones):
    """1,000 orders in zone a, 10 in zone b, none in zone c."""
    for name, count in (("a", 1000), ("b", 10), ("c", 0)):
        conn = zones[name].connect("zonesync_app")
        with conn.cursor() as cur:
            cur.execute("DELETE FROM orders")
            rows = [(i, i % 7, i * 1.5) for i in range(1, count + 1)]
            if rows:
                cur.executemany("INSERT INTO orders (order_id, tenant_id, amount) VALUES (%s, %s, %s)", rows)
    return zones


def _zones(orders, *names):
    args = argparse.Namespace(
        zone=[f"{n}={orders[n].jdbc_url('zonesync_app')}" for n in names], zone_user=[f"{n}=root" for n in names]
    )
    return zone_props(args)


def test_partitioned_jdbc_read_of_a_zone_table(spark, orders):
    url, props = _zones(orders, "a")["a"]
    df = read_table_partitioned(spark, url, props, "orders", "order_id", 4)
    assert df.rdd.getNumPartitions() == 4
    sizes = df.rdd.glom().map(len).collect()
    assert sum(sizes) == 1000 and all(s > 0 for s in sizes), f"ranges should all hold rows: {sizes}"
    assert df.agg({"amount": "sum"}).collect()[0][0] == pytest.approx(sum(i * 1.5 for i in range(1, 1001)))


def test_inventory_across_zones(spark, orders):
    df = extract(spark, _zones(orders, "a", "b", "c"), "orders", "order_id", 4)
    got = {r["zone"]: r for r in summarize(df, "order_id").collect()}
    assert got["a"]["rows"] == 1000 and got["b"]["rows"] == 10 and "c" not in got
    assert (got["a"]["key_min"], got["a"]["key_max"]) == (1, 1000)


def test_summarize_is_order_independent_and_sensitive_to_any_column(spark):
    rows = [(1, "x", "a"), (2, "y", "a"), (3, "z", "b")]
    df = spark.createDataFrame(rows, ["id", "v", "_zone"])
    shuffled = spark.createDataFrame(list(reversed(rows)), ["id", "v", "_zone"])
    assertDataFrameEqual(summarize(df, "id"), summarize(shuffled, "id"))
    changed = spark.createDataFrame([(1, "x", "a"), (2, "Y", "a"), (3, "z", "b")], ["id", "v", "_zone"])
    a_before = summarize(df, "id").filter("zone = 'a'").collect()[0]
    a_after = summarize(changed, "id").filter("zone = 'a'").collect()[0]
    assert a_before["rows"] == a_after["rows"] and a_before["checksum"] != a_after["checksum"]
    expected = spark.createDataFrame([("b", 1, 3, 3)], ["zone", "rows", "key_min", "key_max"])
    assertDataFrameEqual(summarize(df, "id").filter("zone = 'b'").drop("checksum"), expected)
