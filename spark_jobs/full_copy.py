"""full_copy: the row-copy half of an online full copy (docs/copy.md).

Reads a table's key-range chunks from the source zone over JDBC (a wave of
`--parallel` chunks at a time, one Spark partition each, the range pushed down as
the query's WHERE), appends them to a staging table in the target, and has the
target merge each chunk with the applier's version rule and the tombstones
(zonesync.copy.merge), marking the chunk done in the same transaction. A re-run
of the same run id skips done chunks, so a kill -9 of the driver or an executor
at any moment loses at most the chunks in flight, which run again.

    spark-submit spark_jobs/full_copy.py --run-id R --source a --target b --table tenants \\
        --zone a=jdbc:mysql://127.0.0.1:23307/zonesync_app --zone b=jdbc:mysql://... --output /tmp/copy.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run by spark-submit as a file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from spark_jobs.common import IDENT, add_zone_args, build_session, db_connect, zone_props  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="full_copy")
    parser.add_argument("--run-id", required=True, help="the copy's run id (its chunks' state is kept under it)")
    parser.add_argument("--source", required=True, help="zone the rows are read from")
    parser.add_argument("--target", required=True, help="zone the rows are merged into")
    parser.add_argument("--table", action="append", required=True, help="a table to copy (repeat, or a,b)")
    parser.add_argument("--chunk-rows", type=int, default=50_000, help="rows per key-range chunk")
    parser.add_argument("--parallel", type=int, default=4, help="chunks read and merged at a time")
    parser.add_argument("--stop-after", type=int, default=0, help="(tests) stop after this many chunks")
    parser.add_argument("--meta", help="the meta store, mysql://user@host:port/db (password: ZONESYNC_META_PASSWORD)")
    parser.add_argument("--max-lag-s", type=float, default=0.0, help="wait while another zone lags more (0: never)")
    add_zone_args(parser)
    args = parser.parse_args(argv)
    args.table = [t for value in args.table for t in value.split(",") if t]  # --table a,b too
    for t in args.table:
        if not IDENT.match(t):
            parser.error(f"--table {t!r} is not a plain SQL identifier")
    if not 100 <= args.chunk_rows <= 10_000_000:
        parser.error(f"--chunk-rows {args.chunk_rows} is out of range: use 100..10000000")
    if not 1 <= args.parallel <= 256:
        parser.error(f"--parallel {args.parallel} is out of range: use 1..256")
    if args.max_lag_s < 0:
        parser.error(f"--max-lag-s {args.max_lag_s}: use 0 (never wait) or a number of seconds")
    if args.max_lag_s and not args.meta:
        parser.error("--max-lag-s needs --meta mysql://user@host:port/db: the lag is read from the meta store")
    return args


def extract(spark, url: str, props: dict, db: str, table: str, cols: list[str], chunks: list[dict]):
    """One DataFrame of a wave's chunks: each chunk one JDBC query (one partition) of its
    key range, tagged with its number."""
    from zonesync.copy.chunks import predicate
    from zonesync.copy.merge import CHUNK_COL

    frames = []
    for c in chunks:
        where = predicate(cols, c["lo"], c["hi"])
        query = f"(SELECT t.*, {int(c['chunk'])} AS `{CHUNK_COL}` FROM `{db}`.`{table}` t WHERE {where}) AS c"
        frames.append(spark.read.jdbc(url, query, properties={**props, "fetchsize": "10000"}))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def transform(df, columns: list[str]):
    """The staged rows: the table's columns in the target's order, then the chunk's."""
    from zonesync.copy.merge import CHUNK_COL

    return df.select(*[f"`{c}`" for c in columns], CHUNK_COL)


def load(df, url: str, props: dict, stage: str) -> None:
    write_props = {
        **props,
        "batchsize": "10000",
        "rewriteBatchedStatements": "true",
        # staged rows never reach the target's replicator (they are not the app's tables either)
        "sessionInitStatement": "SET time_zone = '+00:00', skip_replication = 1",
    }
    df.write.jdbc(url, f"zonesync.`{stage}`", mode="append", properties=write_props)


def stage_orphans(spark, zones: dict, args, table: str, key: list[str], stage: str) -> int:
    """Keys the target holds and the source lacks, staged in the target for the prune step
    (zonesync.copy.prune): an anti-join of both zones' keys, each read in key ranges."""
    from zonesync.copy.prune import orphans_name

    frames = [_read_keys(spark, *zones[zone], table, key, args.parallel) for zone in (args.target, args.source)]
    orphans = find_orphans(*frames, key)
    url, props = zones[args.target]
    write_props = {**props, "sessionInitStatement": "SET skip_replication = 1", "truncate": "true"}
    orphans.write.jdbc(url, f"zonesync.`{orphans_name(stage)}`", mode="overwrite", properties=write_props)
    return orphans.count()


def _read_keys(spark, url: str, props: dict, table: str, key: list[str], partitions: int):
    """A table's key columns, read in `partitions` ranges of its first key column."""
    db, keys = url.rsplit("/", 1)[1], ", ".join(f"`{c}`" for c in key)
    props = {**props, "fetchsize": "10000"}
    bounds = spark.read.jdbc(
        url, f"(SELECT MIN(`{key[0]}`) AS lo, MAX(`{key[0]}`) AS hi FROM `{db}`.`{table}`) AS b", properties=props
    ).collect()[0]
    query = f"(SELECT {keys} FROM `{db}`.`{table}`) AS k"
    if bounds["lo"] is None or partitions <= 1:
        return spark.read.jdbc(url, query, properties=props)
    return spark.read.jdbc(url, query, column=key[0], lowerBound=int(bounds["lo"]),
                           upperBound=int(bounds["hi"]) + 1, numPartitions=partitions, properties=props)  # fmt: skip


def find_orphans(target_keys, source_keys, key: list[str]):
    """The target's keys the source lacks (pure)."""
    return target_keys.join(source_keys, on=key, how="left_anti")


def copy_table(spark, args, zones: dict, table: str, log=print, staged=None) -> dict:
    """Copy one table's pending chunks, a wave at a time; `staged(table, wave)` (tests) runs
    after a wave is staged and before it is merged."""
    from zonesync.copy import chunks as chunk_plan
    from zonesync.copy.merge import clear_chunks, create_stage, merge_chunk, stage_name
    from zonesync.copy.throttle import wait_for_lag

    meta = _meta(args)

    (src_url, src_props), (dst_url, dst_props) = zones[args.source], zones[args.target]
    src, dst = db_connect(src_url, src_props), db_connect(dst_url, dst_props)
    try:
        src_db, dst_db = src_url.rsplit("/", 1)[1], dst_url.rsplit("/", 1)[1]
        key = chunk_plan.check_copyable(src, src_db, table, args.source)
        chunk_plan.check_copyable(dst, dst_db, table, args.target)
        columns = [c for c, _ in _columns(dst, dst_db, table)]
        plan = chunk_plan.ensure_plan(dst, src, args.run_id, table, key, args.chunk_rows)
        stage = stage_name(args.run_id, table)
        with dst.cursor() as cur:
            for stmt in create_stage(dst_db, table, stage):
                cur.execute(stmt)
        pending = [c for c in plan if c["status"] != "done"]
        clear_chunks(dst, stage, [c["chunk"] for c in pending])
        started, rows, done = time.monotonic(), 0, len(plan) - len(pending)
        if args.stop_after:
            pending = pending[: args.stop_after]
        for start in range(0, len(pending), args.parallel):
            wave = pending[start : start + args.parallel]
            if meta is not None:
                wait_for_lag(meta, args.target, args.max_lag_s, log)
            load(transform(extract(spark, src_url, src_props, src_db, table, key, wave), columns), dst_url, dst_props,
                 stage)  # fmt: skip
            if staged is not None:
                staged(table, wave)
            for c in wave:
                merged = merge_chunk(dst, dst_db, args.run_id, table, stage, columns, key, c["chunk"])
                rows += merged or 0
                done += 1
            took = time.monotonic() - started
            rate = rows / max(took, 1e-9)
            log(f"{table}: {done}/{len(plan)} chunks, {rows} rows in {took:.1f} s ({rate:.0f} rows/s)")
        seconds = round(time.monotonic() - started, 3)
        orphans = stage_orphans(spark, zones, args, table, key, stage) if done == len(plan) else None
        return {"chunks": len(plan), "done": done, "rows": rows, "seconds": seconds, "orphans": orphans}
    finally:
        src.close()
        dst.close()


def _meta(args):
    """The meta store the throttle reads (None without --max-lag-s)."""
    if not getattr(args, "max_lag_s", 0):
        return None
    import os

    from zonesync.meta.db import MetaConfig

    return MetaConfig.from_env(
        {"ZONESYNC_META_URL": args.meta, "ZONESYNC_META_PASSWORD": os.environ.get("ZONESYNC_META_PASSWORD", "")}
    )


def _columns(conn, db: str, table: str) -> list[tuple[str, str]]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        rows = cur.fetchall()
    conn.commit()
    return list(rows)


def run(spark, args, staged=None, log=print) -> dict:
    zones = zone_props(args)
    for field, zone in (("--source", args.source), ("--target", args.target)):
        if zone not in zones:
            raise SystemExit(f"{field} {zone}: no --zone {zone}=JDBC_URL was given")
    result = {t: copy_table(spark, args, zones, t, log=log, staged=staged) for t in args.table}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = build_session("zonesync-full-copy")
    try:
        run(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
