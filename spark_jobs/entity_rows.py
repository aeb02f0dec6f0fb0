"""entity_rows: every row of a locating entity in one zone, for entities too large for one
process (`zonesync entity rows` reads through one connection; tagging/locate.py).

    spark-submit spark_jobs/entity_rows.py --entity tenant:42 \\
        --zone b=jdbc:mysql://127.0.0.1:23307/zonesync_app --output /tmp/rows.json [--keys /tmp/keys]

1. extract: the entity's segments in the zone's tag store (its rows of `tag_segments`,
   pushed down by the entity's primary-key prefix), of the zone's database and of every
   KV repo of the tag rules (docs/kv.md: a key's segments have table '');
2. transform (pure, `fold`): the segments' entries exploded and folded as the store folds
   them (per repo, table and idx the newest version, on a tie the later batch, then the
   later line), the live ones kept;
3. forward rules, parents first: the parent's keys in chunks of 1000, each chunk a task
   that asks the zone for the children's keys (the two indexed queries locate.py makes);
4. load: per-table counts and per-KV-repo key counts in --output, and with --keys every
   (repo, table, idx) as JSON lines (a KV key's idx: the key as JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run by spark-submit as a file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.common import add_zone_args, build_session, connect_kwargs, tag_rules, zone_props  # noqa: E402
from zonesync.tagging.rules import TagRules  # noqa: E402

CHUNK = 1000  # parent keys per forward query


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="entity_rows")
    parser.add_argument("--entity", required=True, metavar="TYPE:ID", help="the locating entity, e.g. tenant:42")
    parser.add_argument("--keys", help="a directory for every row's (table, idx) as JSON lines")
    parser.add_argument("--meta", help="mysql://user@host:port/db of the meta store (default: the dev env's)")
    add_zone_args(parser)
    args = parser.parse_args(argv)
    kind, sep, ident = args.entity.partition(":")
    from zonesync.sql_names import is_ident

    if not sep or not is_ident(kind) or not ident or len(ident) > 128:
        parser.error(f"--entity {args.entity!r}: TYPE:ID, TYPE a plain name, ID 1..128 characters (tenant:42)")
    args.entity_type, args.entity_id = kind, ident
    if len(args.zone) != 1:
        parser.error("--zone: exactly one, the zone whose rows are listed (NAME=JDBC_URL)")
    return args


def extract(spark, url: str, props: dict, repos: list[str], entity_type: str, entity_id: str):
    """The entity's segments in `repos`: (repo, table_name, batch_no, entries)."""
    from pymysql.converters import escape_string

    listed = ", ".join(f"'{escape_string(r)}'" for r in repos)
    query = ("(SELECT repo, table_name, batch_no, entries FROM zonesync.tag_segments "
             f"WHERE entity_type = '{escape_string(entity_type)}' AND entity_id = '{escape_string(entity_id)}' "
             f"AND repo IN ({listed})) AS s")  # fmt: skip
    return spark.read.jdbc(url, query, properties=props)


def fold(segments):
    """Segments -> (repo, table_name, idx) of the rows and keys the entity holds: each line
    an entry, the newest per (repo, table, idx) kept (on equal versions the later batch,
    then the later line), those not deleted."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = segments.select("repo", "table_name", "batch_no",
                            F.posexplode(F.split("entries", "\n")).alias("pos", "line"))  # fmt: skip
    parts = F.split("line", "\t")
    entries = lines.where(F.col("line") != "").select(
        "repo", "table_name", "batch_no", "pos",
        F.element_at(parts, 1).alias("idx"),
        F.element_at(parts, 2).cast("bigint").alias("version"),
        F.element_at(parts, 3).alias("deleted"),
    )  # fmt: skip
    newest = Window.partitionBy("repo", "table_name", "idx").orderBy(F.desc("version"), F.desc("batch_no"),
                                                                     F.desc("pos"))  # fmt: skip
    return (entries.withColumn("n", F.row_number().over(newest)).where("n = 1 AND deleted = '0'")
            .select("repo", "table_name", "idx"))  # fmt: skip


def forward(spark, rows, rules, repo: str, kwargs: dict):
    """`rows` with the rows of every forward-rule table of the repo added, parents first:
    each chunk of a parent's keys asks the zone for its children's keys (a task each)."""
    from zonesync.tagging.locate import forward_order

    found = rows
    for rule in forward_order(rules, repo):
        parent = rules.mysql_rule(repo, rule.forward_table)
        mine = found.where((found.repo == repo) & (found.table_name == parent.table))
        keys = [r["idx"] for r in mine.select("idx").collect()]
        chunks = [keys[lo : lo + CHUNK] for lo in range(0, len(keys), CHUNK)]
        spec = (repo, parent.table, tuple(parent.index_keys), rule.table, dict(rule.forward_columns),
                tuple(rule.index_keys))  # fmt: skip
        if not chunks:
            continue
        children = spark.sparkContext.parallelize(chunks, len(chunks)).mapPartitions(
            lambda part, spec=spec: _children(part, spec, kwargs)
        )
        found = found.unionByName(spark.createDataFrame(children, "repo string, table_name string, idx string"))
    return found


def _children(part, spec, kwargs):
    """(repo, child table, idx) of the children of one chunk of parent keys (on an executor:
    imports only zonesync and pymysql)."""
    import pymysql

    from zonesync.tagging.locate import column_values, keys_where

    repo, parent, parent_keys, child, columns, child_keys = spec
    child_cols = list(columns)
    conn = pymysql.connect(**kwargs)
    try:
        for keys in part:
            values = column_values(conn, repo, parent, parent_keys, keys, [columns[c] for c in child_cols])
            for idx in sorted(keys_where(conn, repo, child, child_cols, values, child_keys)):
                yield (repo, child, idx)
    finally:
        conn.close()


def run(spark, args) -> dict:
    ((zone, (url, props)),) = zone_props(args).items()
    repo = url.rsplit("/", 1)[1].split("?")[0]
    found = tag_rules(args)
    rules = found[1] if found else TagRules()
    kv_repos = sorted(set(rules.kv_repos) - {repo})
    rows = fold(extract(spark, url, props, [repo, *kv_repos], args.entity_type, args.entity_id))
    rows = forward(spark, rows.cache(), rules, repo, connect_kwargs(url, props)).cache()
    counted = rows.groupBy("repo", "table_name").count().collect()
    counts = {r["table_name"]: r["count"] for r in counted if r["repo"] == repo}
    keys = {r["repo"]: r["count"] for r in counted if r["repo"] != repo}
    if args.keys:
        rows.orderBy("repo", "table_name", "idx").write.mode("overwrite").json(args.keys)
    out = {"zone": zone, "entity": f"{args.entity_type}:{args.entity_id}", "rows": sum(counts.values()),
           "tables": dict(sorted(counts.items())), "kv_keys": dict(sorted(keys.items()))}  # fmt: skip
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = build_session("zonesync-entity-rows")
    try:
        out = run(spark, args)
    finally:
        spark.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
