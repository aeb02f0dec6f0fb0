"""The consistency check's row look: the rows of the chunks whose checksums differ, read
from every zone over JDBC (one partition per chunk and zone, each a keyed range read
the server answers from the primary key), and the keys whose rows are not the same
everywhere (a pure transform).

Only chunks that still differ once the zones have settled are read, so this moves a
few chunks' rows, never the table.
"""

from __future__ import annotations

from zonesync.check import sql as check_sql
from zonesync.copy.chunks import predicate

PAYLOAD = ("_zone", "_v", "_o", "_zs_hash")  # besides the key and the c_<column> texts


def extract(spark, zones: dict, table: str, columns: list[tuple[str, str]], key: list[str], chunks: list[dict],
            nullable: set[str] | None = None, where: str | None = None):  # fmt: skip
    """One DataFrame of the chunks' rows in every zone (those `where` is true for), tagged
    with `_zone`."""
    from pyspark.sql import functions as F

    relation = check_sql.rows_relation(table, columns, key, nullable, where)
    predicates = [predicate(key, c["lo"], c["hi"]) for c in chunks]
    frames = [
        spark.read.jdbc(url, relation, predicates=predicates, properties=props).withColumn("_zone", F.lit(name))
        for name, (url, props) in zones.items()
    ]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def differing_keys(df, key: list[str], zone_count: int):
    """Per key not held alike by every zone: the key and `rows`, each zone's row (its
    `_zone`, `_v`, `_o`, `_zs_hash` and texts) sorted by zone. A key is alike when all
    `zone_count` zones hold it with one row checksum."""
    from pyspark.sql import functions as F

    payload = [c for c in df.columns if c not in key]
    ordered = ["_zone", *[c for c in payload if c != "_zone"]]  # structs sort by their first field
    grouped = df.groupBy(*key).agg(
        F.count(F.lit(1)).alias("_n"),
        F.countDistinct("_zs_hash").alias("_h"),
        F.array_sort(F.collect_list(F.struct(*ordered))).alias("rows"),
    )
    return grouped.where((F.col("_n") < zone_count) | (F.col("_h") > 1)).drop("_n", "_h")


def as_rows(record, key: list[str]) -> tuple[dict, dict[str, dict]]:
    """A collected differing_keys() record as ({key column: value}, {zone: row}) for
    zonesync.check.diff (pure)."""
    pk = {c: record[c] for c in key}
    rows = {}
    for r in record["rows"]:
        d = r.asDict()
        rows[d["_zone"]] = {
            "_v": d["_v"],
            "_o": d["_o"],
            "_zs_hash": d["_zs_hash"],
            "cols": {c[2:]: v for c, v in d.items() if c.startswith("c_")},
        }
    return pk, rows
