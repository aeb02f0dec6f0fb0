"""tag_backfill: tag the rows a zone held before their table's tag rule existed.

The tagger tags changes; rows written before a rule was published never change for it
to see. This job reads each registered table of one zone in chunks of its key range,
turns each row into its tag entry exactly as the tagger would (tagging/extract.row_tag:
the row's unique-key values and entity, at the row's `_zs_version`), and appends each
chunk's entries to the zone's tag store as segments, one per entity, in one transaction
with the chunk's mark in `zonesync.tag_backfill`. Resume = the same --run-id again: the
chunks marked are skipped.

Racing live writes is safe once the zone's tagger tags by the rule (the job waits for
`tag_writer.rules_version`): a row the job reads at version v and that changes later
gets, from the tagger, the change's entries at a version above v, which win the fold
whatever order the two are written in (docs/tagging.md).

    spark-submit spark_jobs/tag_backfill.py --run-id rules-v7 --zone b=jdbc:mysql://127.0.0.1:23307/zonesync_app \\
        --output /tmp/backfill.json [--table orders] [--chunk-rows 100000]

The chunks are a Spark job's partitions: each is read over JDBC with its key range
pushed down, transformed (pure: `transform`) and written by its executor.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run by spark-submit as a file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.common import (  # noqa: E402
    add_zone_args,
    build_session,
    connect_kwargs,
    db_connect,
    meta_config,
    tag_rules,
    zone_props,
)
from zonesync.sql_names import is_ident, quote  # noqa: E402

INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tag_backfill")
    parser.add_argument("--run-id", required=True, help="the backfill's name; the same name resumes it")
    parser.add_argument("--table", action="append", default=[], help="a tagged table (default: every one)")
    parser.add_argument("--chunk-rows", type=int, default=100_000, help="key values per chunk")
    parser.add_argument("--wait-tagger-s", type=float, default=300.0,
                        help="how long to wait for the zone's tagger to tag by the rules in force")  # fmt: skip
    parser.add_argument("--stop-after", type=int, default=0, help=argparse.SUPPRESS)  # tests: chunks, then stop
    parser.add_argument("--airflow-run-id", help="the Airflow run that started this attempt (for the console)")
    parser.add_argument("--meta", help="mysql://user@host:port/db of the meta store (default: the dev env's)")
    add_zone_args(parser)
    args = parser.parse_args(argv)
    args.table = [t for value in args.table for t in value.split(",") if t]
    for t in args.table:
        if not is_ident(t):
            parser.error(f"--table {t!r} is not a plain SQL identifier")
    if len(args.zone) != 1:
        parser.error("--zone: exactly one, the zone whose tag store is filled (NAME=JDBC_URL)")
    if not 1_000 <= args.chunk_rows <= 10_000_000:
        parser.error(f"--chunk-rows {args.chunk_rows}: use 1000..10000000")
    if not (len(args.run_id) <= 64 and args.run_id.isprintable() and args.run_id.strip()):
        parser.error("--run-id: 1..64 printable characters")
    return args


def rules_in_force(args):
    """(version, TagRules) from meta."""
    found = tag_rules(args)
    if found is None:
        raise SystemExit("no tag rules published: `zonesync tags apply FILE --reason ...` first")
    return found


# -- the plan (driver) ----------------------------------------------------------------
def plan_table(conn, repo: str, rule, chunk_rows: int, run_id: str) -> dict:
    """How a table is read: the integer column its chunks split (the unique key's, else the
    primary key's; none: one chunk), its key range and whether it has `_zs_version`. A run
    resumed keeps its first key and chunk size (its marks hold them): its chunk numbers
    mean the same ranges whatever rows came or went since; only the end may grow."""
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                    (repo, rule.table))  # fmt: skip
        columns = {name: (kind.lower(), key) for name, kind, key in cur.fetchall()}
        if not columns:
            raise SystemExit(f"--table {rule.table}: no such table in {repo}")
        missing = [c for c in (*rule.index_keys, rule.entity_field) if c not in columns]
        if missing:
            raise SystemExit(f"{repo}.{rule.table}: the tag rule names column(s) {missing} the table does not have")
        primary = [c for c, (_, key) in columns.items() if key == "PRI"]
        split = next((c for c in ([rule.index_keys[0]] if len(rule.index_keys) == 1 else []) + primary[:1]
                      if columns[c][0] in INTEGER_TYPES), None)  # fmt: skip
        lo = hi = None
        if split:
            cur.execute(f"SELECT MIN({quote(split)}), MAX({quote(split)}) FROM {quote(repo)}.{quote(rule.table)}")
            lo, hi = cur.fetchone()
        cur.execute("SELECT plan_lo, chunk_rows FROM zonesync.tag_backfill WHERE run_id = %s AND repo = %s "
                    "AND table_name = %s LIMIT 1", (run_id, repo, rule.table))  # fmt: skip
        kept = cur.fetchone()
    if kept is not None:
        if int(kept[1]) != chunk_rows:
            raise SystemExit(f"--chunk-rows {chunk_rows}: run {run_id} cut {rule.table} in chunks of {kept[1]}; "
                             f"resume it with --chunk-rows {kept[1]} (or start a new --run-id)")  # fmt: skip
        if kept[0] is not None:
            lo = int(kept[0]) if lo is None else min(int(lo), int(kept[0]))
            hi = lo if hi is None else hi
    chunks = 1 if lo is None else (int(hi) - int(lo)) // chunk_rows + 1
    return {"table": rule.table, "split": split, "lo": None if lo is None else int(lo), "chunks": chunks,
            "chunk_rows": chunk_rows, "versioned": "_zs_version" in columns}  # fmt: skip


def done_chunks(conn, run_id: str, repo: str, table: str) -> set[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT chunk_no FROM zonesync.tag_backfill WHERE run_id = %s AND repo = %s AND table_name = %s",
                    (run_id, repo, table))  # fmt: skip
        return {int(r[0]) for r in cur.fetchall()}


def wait_for_tagger(conn, version: int, timeout_s: float, zone: str) -> None:
    """Until the zone's tagger tags by `version` (tag_writer.rules_version), or SystemExit."""
    deadline = time.monotonic() + timeout_s
    while True:
        conn.commit()  # a fresh snapshot each look
        with conn.cursor() as cur:
            cur.execute("SELECT rules_version FROM zonesync.tag_writer WHERE id = 1")
            row = cur.fetchone()
        if row and int(row[0]) >= version:
            return
        if time.monotonic() >= deadline:
            raise SystemExit(f"zone {zone}'s tagger does not tag by tag rules version {version} after "
                             f"{timeout_s:.0f} s (it has {row[0] if row else 'none'}): start it "
                             f"(`zonesync tag --zone {zone}`), then run this again")  # fmt: skip


# -- extract, transform, load ---------------------------------------------------------
def extract(spark, url: str, props: dict, repo: str, rule, plan: dict, chunk_nos: list[int]):
    """The rows of the chunks `chunk_nos`: (chunk_no, k0.., entity, version), a Spark
    partition per chunk, each chunk's key range pushed down."""
    from pyspark.sql import functions as F

    select = ", ".join(f"{quote(c)} AS k{i}" for i, c in enumerate(rule.index_keys))
    version = "`_zs_version`" if plan["versioned"] else "0"
    split = plan["split"]
    split_col = f", {quote(split)} AS split" if split else ""
    source = (f"(SELECT {select}, {quote(rule.entity_field)} AS entity, {version} AS version{split_col} "
              f"FROM {quote(repo)}.{quote(rule.table)}) AS t")  # fmt: skip
    if not split or plan["lo"] is None:  # (an empty table: one chunk, nothing in it)
        df = spark.read.jdbc(url, source, properties=props)
        return df.withColumn("chunk_no", F.lit(0))
    lo, size = plan["lo"], plan["chunk_rows"]
    predicates = [f"split >= {lo + n * size} AND split < {lo + (n + 1) * size}" for n in chunk_nos]
    df = spark.read.jdbc(url, source, predicates=predicates, properties=props)
    return df.withColumn("chunk_no", F.floor((F.col("split") - F.lit(lo)) / F.lit(size)).cast("int")).drop("split")


def transform(rows, entity_type: str, table: str):
    """Rows -> (chunk_no, entity_type, entity_id, table_name, entries, rows_tagged): per
    chunk and entity, the `idx <tab> version <tab> 0` lines of its rows (row_tag)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    keys = sorted((c for c in rows.columns if c.startswith("k") and c[1:].isdigit()), key=lambda c: int(c[1:]))
    tag_type = StructType([StructField("idx", StringType()), StructField("entity_id", StringType())])

    @F.udf(tag_type)
    def tag(values, entity):
        from zonesync.tagging.extract import row_tag

        found = row_tag(list(values), entity)
        return None if found is None else {"idx": found[0], "entity_id": found[1]}

    tagged = rows.withColumn("tag", tag(F.struct(*keys), F.col("entity")))
    lines = tagged.where(F.col("tag").isNotNull()).select(
        "chunk_no",
        F.col("tag.entity_id").alias("entity_id"),
        F.concat_ws("\t", F.col("tag.idx"), F.col("version").cast("string"), F.lit("0")).alias("line"),
    )
    return lines.groupBy("chunk_no", "entity_id").agg(
        F.concat_ws("\n", F.sort_array(F.collect_list("line"))).alias("entries"),
        F.count(F.lit(1)).alias("rows_tagged"),
    ).select("chunk_no", F.lit(entity_type).alias("entity_type"), "entity_id", F.lit(table).alias("table_name"),
             "entries", "rows_tagged")  # fmt: skip


def batch_number(started_s: int, chunk_no: int) -> int:
    """A backfill chunk's segment number: below zero, apart from every other run's."""
    return -(started_s * 1_000_000 + chunk_no + 1)


def load(segments, url: str, props: dict, run_id: str, repo: str, plan: dict, started_s: int, chunk_nos: list[int]):
    """Each chunk's segments and its mark in one transaction, by the executor holding it
    (a chunk marked already, by an earlier attempt of its task, is left as it is). The
    chunks that had no taggable row are marked by the driver."""
    grouped = segments.repartition(max(1, len(chunk_nos)), "chunk_no")
    table, mark = plan["table"], (plan["lo"], plan["chunk_rows"])

    kwargs = connect_kwargs(url, props)  # (executors import neither spark_jobs nor this module)

    def write(rows):
        import pymysql

        by_chunk: dict[int, list] = {}
        for r in rows:
            by_chunk.setdefault(r["chunk_no"], []).append(r)
        if not by_chunk:
            return
        conn = pymysql.connect(**kwargs)
        try:
            for chunk_no, part in sorted(by_chunk.items()):
                _write_chunk(conn, part, (run_id, repo, table, chunk_no, *mark), batch_number(started_s, chunk_no))
        finally:
            conn.close()

    grouped.foreachPartition(write)


def _write_chunk(conn, part: list, mark: tuple, batch_no: int) -> bool:
    """Whether this attempt wrote the chunk (False: an earlier one had). A deadlock with
    the tagger's writes (both append to the same entities' segments) is tried again."""
    import pymysql

    repo, table = mark[1], mark[2]
    rows = [(r["entity_type"], r["entity_id"], repo, table, batch_no, r["entries"]) for r in part]
    for attempt in range(8):
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO zonesync.tag_backfill (run_id, repo, table_name, chunk_no, plan_lo, "
                            "chunk_rows, batch_no, rows_tagged) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                            (*mark, batch_no, sum(r["rows_tagged"] for r in part)))  # fmt: skip
                cur.executemany("INSERT INTO zonesync.tag_segments (entity_type, entity_id, repo, table_name, "
                                "batch_no, entries) VALUES (%s, %s, %s, %s, %s, %s)", rows)  # fmt: skip
            conn.commit()
            return True
        except pymysql.err.IntegrityError:  # marked by an earlier attempt: its segments are there
            conn.rollback()
            return False
        except pymysql.err.OperationalError as exc:
            conn.rollback()
            if exc.args[0] not in (1213, 1205) or attempt == 7:  # deadlock, lock wait timeout
                raise
            time.sleep(0.05 * (attempt + 1))
    return False


def mark_empty(conn, run_id: str, repo: str, plan: dict, chunk_nos: list[int], started_s: int) -> None:
    """The chunks that were read but held no taggable row, marked done."""
    with conn.cursor() as cur:
        cur.executemany("INSERT IGNORE INTO zonesync.tag_backfill (run_id, repo, table_name, chunk_no, plan_lo, "
                        "chunk_rows, batch_no, rows_tagged) VALUES (%s, %s, %s, %s, %s, %s, %s, 0)",
                        [(run_id, repo, plan["table"], n, plan["lo"], plan["chunk_rows"], batch_number(started_s, n))
                         for n in chunk_nos])  # fmt: skip
    conn.commit()


def started_second(conn, run_id: str) -> int:
    """The run's start (its segments' numbers): its first mark's, or now for a new run."""
    with conn.cursor() as cur:
        cur.execute("SELECT MIN(batch_no) FROM zonesync.tag_backfill WHERE run_id = %s", (run_id,))
        first = cur.fetchone()[0]
    return (-int(first) - 1) // 1_000_000 if first is not None else int(time.time())


def backfill_table(spark, args, url: str, props: dict, conn, repo: str, rule, plan: dict, started_s: int,
                   budget: list, report) -> dict:  # fmt: skip
    """One table's chunks not done yet, in waves; `budget`: [chunks left to do] (tests stop
    a run part way; None: all); `report(chunks, rows)` after each wave."""
    done = done_chunks(conn, args.run_id, repo, rule.table)
    pending = [n for n in range(plan["chunks"]) if n not in done]
    if budget[0] is not None:
        pending = pending[: budget[0]]
        budget[0] -= len(pending)
    print(f"{rule.table}: {plan['chunks']} chunk(s) of {args.chunk_rows} keys on {plan['split'] or '(unsplit)'}, "
          f"{len(done)} done before, {len(pending)} to tag", flush=True)  # fmt: skip
    tagged = 0
    for lo in range(0, len(pending), 64):  # waves: progress shows, a kill loses little
        wave = pending[lo : lo + 64]
        segments = transform(extract(spark, url, props, repo, rule, plan, wave), rule.entity_type, rule.table)
        segments.cache()
        load(segments, url, props, args.run_id, repo, plan, started_s, wave)
        counts = {r["chunk_no"]: r["n"] for r in segments.groupBy("chunk_no").agg({"rows_tagged": "sum"})
                  .withColumnRenamed("sum(rows_tagged)", "n").collect()}  # fmt: skip
        segments.unpersist()
        mark_empty(conn, args.run_id, repo, plan, [n for n in wave if n not in counts], started_s)
        tagged += sum(counts.values())
        report(len(wave), sum(counts.values()))
    return {"chunks": plan["chunks"], "resumed_after": len(done), "rows_tagged": tagged}


def rows_done(conn, run_id: str) -> tuple[int, int]:
    """(chunks, rows) an earlier attempt of the run tagged (its marks in the zone)."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), COALESCE(SUM(rows_tagged), 0) FROM zonesync.tag_backfill WHERE run_id = %s",
                    (run_id,))  # fmt: skip
        chunks, rows = cur.fetchone()
    return int(chunks), int(rows)


class Reporter:
    """The run's progress to meta (tagging/backfill_runs.py: the console and `zonesync runs`
    read it) and to the task log, after each wave: chunks done of all, rows, rate, ETA."""

    def __init__(self, args, zone: str, tables: list[str], plans: dict, conn):
        from zonesync.tagging.backfill_runs import BackfillRuns

        self.runs, self.run_id = BackfillRuns(meta_config(args)), args.run_id
        done, rows = rows_done(conn, args.run_id)
        self.runs.start(args.run_id, zone, tables, sum(p["chunks"] for p in plans.values()), done, rows,
                        args.airflow_run_id)  # fmt: skip

    def __call__(self, chunks: int, rows: int) -> None:
        self.runs.wave(self.run_id, chunks, rows)
        p = self.runs.get(self.run_id)
        rate = f", {p['rate_rows_s']:,.0f} rows/s" if p["rate_rows_s"] else ""
        eta = f", about {p['eta_s']:,.0f} s left" if p["eta_s"] else ""
        print(f"backfill {self.run_id}: {p['done']}/{p['total']} chunks, {p['rows']:,} rows tagged{rate}{eta}",
              flush=True)  # fmt: skip

    def finish(self, complete: bool) -> None:
        if complete:  # a run stopped part way (tests: --stop-after) stays running, as a killed one does
            self.runs.finish(self.run_id, "succeeded")


def run(spark, args) -> dict:
    """The backfill `args` asks for, on `spark`: its result (also written to --output)."""
    ((zone, (url, props)),) = zone_props(args).items()
    repo = url.rsplit("/", 1)[1].split("?")[0]
    version, rules = rules_in_force(args)
    tables = {r.table: r for r in rules.by_table(repo).values()}
    unknown = [t for t in args.table if t not in tables]
    if unknown:
        raise SystemExit(f"--table {unknown[0]}: not a tagged table of {repo} in tag rules version {version} "
                         f"(tagged: {', '.join(sorted(tables)) or 'none'})")  # fmt: skip
    chosen = [tables[t] for t in (args.table or sorted(tables))]
    conn = db_connect(url, props)
    try:
        wait_for_tagger(conn, version, args.wait_tagger_s, zone)
        started_s = started_second(conn, args.run_id)
        plans = {r.table: plan_table(conn, repo, r, args.chunk_rows, args.run_id) for r in chosen}
        report = Reporter(args, zone, [r.table for r in chosen], plans, conn)
        budget = [args.stop_after or None]
        result = {r.table: backfill_table(spark, args, url, props, conn, repo, r, plans[r.table], started_s, budget,
                                          report) for r in chosen}  # fmt: skip
        report.finish(complete=budget[0] is None or budget[0] > 0)
    finally:
        conn.close()
    out = {"run_id": args.run_id, "zone": zone, "rules_version": version, "tables": result}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = build_session("zonesync-tag-backfill")
    try:
        out = run(spark, args)
    finally:
        spark.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
