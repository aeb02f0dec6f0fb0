"""zone_inventory: row count, key range and an order-independent checksum of one
table in every zone, read in parallel key ranges over JDBC.

The first Spark job of zonesync and the demo's main job; the checksum is the
same one later consistency checks compare between zones.

    spark-submit spark_jobs/zone_inventory.py --table orders --key order_id \\
        --zone a=jdbc:mysql://127.0.0.1:23307/zonesync_app --output /tmp/inv.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run by spark-submit as a file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.common import add_zone_args, build_session, read_table_partitioned, zone_props  # noqa: E402
from zonesync.sql_names import is_ident  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="zone_inventory")
    parser.add_argument("--table", required=True)
    parser.add_argument("--key", required=True, help="integer primary-key column used to split the read")
    parser.add_argument("--partitions", type=int, default=4)
    add_zone_args(parser)
    args = parser.parse_args(argv)
    for field in ("table", "key"):
        if not is_ident(getattr(args, field)):
            parser.error(f"--{field} {getattr(args, field)!r} is not a plain SQL identifier")
    if not 1 <= args.partitions <= 256:
        parser.error(f"--partitions {args.partitions} is out of range: use 1..256")
    return args


def extract(spark, zones: dict, table: str, key: str, partitions: int):
    """One DataFrame of every zone's rows, tagged with a `_zone` column."""
    from pyspark.sql import functions as F

    frames = [
        read_table_partitioned(spark, url, props, table, key, partitions).withColumn("_zone", F.lit(name))
        for name, (url, props) in zones.items()
    ]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def summarize(df, key: str):
    """Per zone: rows, min and max key, and a checksum independent of row order."""
    from pyspark.sql import functions as F

    cols = [c for c in df.columns if c != "_zone"]
    row_hash = F.xxhash64(*[F.col(f"`{c}`") for c in cols])
    return (
        df.groupBy("_zone")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.min(key).alias("key_min"),
            F.max(key).alias("key_max"),
            F.coalesce(F.bit_xor(row_hash), F.lit(0)).alias("checksum"),
        )
        .withColumnRenamed("_zone", "zone")
    )


def load(summary, zones: list[str], output: str) -> dict:
    found = {r["zone"]: r.asDict() for r in summary.collect()}
    result = {z: found.get(z, {"zone": z, "rows": 0, "key_min": None, "key_max": None, "checksum": 0}) for z in zones}
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2, default=str))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    zones = zone_props(args)
    spark = build_session("zonesync-zone-inventory")
    try:
        df = extract(spark, zones, args.table, args.key, args.partitions)
        result = load(summarize(df, args.key), list(zones), args.output)
    finally:
        spark.stop()
    for zone, r in result.items():
        print(f"zone {zone}: {r['rows']} rows, keys {r['key_min']}..{r['key_max']}, checksum {r['checksum']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
