"""What the consistency check asks of the zones: their JVM endpoints, queries each zone
answers itself (one row back), and the comparison of a chunk's numbers (pure)."""

from __future__ import annotations

from spark_jobs.common import db_connect, jvm_endpoint


def zone_endpoints(spark, zones: dict):
    """The JVM endpoint of every zone, in `zones` order (UTC sessions, read-only use)."""
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    out = gateway.new_array(jvm.zonesync.spark.ChunkCopier.Endpoint, len(zones))
    for i, (url, props) in enumerate(zones.values()):
        out[i] = jvm_endpoint(spark, url, props, "time_zone='+00:00'")
    return out


def zone_numbers(spark, endpoints, queries: list[tuple[str, int, str]]) -> dict[str, list[str]]:
    """Run (tag, zone index, SQL) queries of one row each in the zones, in parallel; {tag: columns}."""
    return {tag: rows[0] for tag, rows in zone_rows(spark, endpoints, queries).items()}


def zone_rows(spark, endpoints, queries: list[tuple[str, int, str]]) -> dict[str, list[list[str]]]:
    """Run (tag, zone index, SQL) queries in the zones, in parallel; {tag: rows of columns}
    (an empty result: one row of [""])."""
    elements = spark._jvm.java.util.ArrayList()
    for tag, zone, sql in queries:
        elements.add(f"{tag}\t{zone}\t{sql}")
    # a partition per executor core, each running every zone's share of its queries on a
    # thread and a connection per zone (ZoneQueries): a task and a connection per query
    # cost as much as a 50k-row chunk's checksum, and a task running one query at a time
    # would leave the other zones idle (measured: 57% of two cores busy, then 90%+)
    slices = max(1, min(len(queries), spark.sparkContext.defaultParallelism))
    rdd = spark.sparkContext._jsc.parallelize(elements, slices)
    out: dict[str, list[list[str]]] = {}
    for line in rdd.mapPartitions(spark._jvm.zonesync.spark.ZoneQueries(endpoints)).collect():
        tag, *cols = str(line).split("\t")
        out.setdefault(tag, []).append(cols)
    return out


def compare(numbers: dict[str, list]) -> str:
    """'match' when every zone has the chunk's row count and checksum, else 'differ' (pure)."""
    return "match" if len({(v[0], v[1]) for v in numbers.values()}) <= 1 else "differ"


def pair_summary(zones: list[str], chunks: list[dict]) -> dict:
    """Per zone pair, the chunks whose numbers differ between the two (pure)."""
    out = {}
    for i, x in enumerate(zones):
        for y in zones[i + 1 :]:
            differ = [c["chunk"] for c in chunks if c["zones"].get(x, [None])[:2] != c["zones"].get(y, [None])[:2]]
            out[f"{x}-{y}"] = {"chunks": len(chunks), "differ": len(differ), "differing_chunks": differ[:100]}
    return out


def connect_zone(zones: dict, name: str):
    url, props = zones[name]
    return db_connect(url, props)
