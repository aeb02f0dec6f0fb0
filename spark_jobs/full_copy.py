"""full_copy: the row-copy half of an online full copy (docs/copy.md).

Copies a table in key-range chunks, a wave of `--parallel` chunks at a time (one
Spark job; partition i of the wave copies chunk i): each task reads its chunk from the
source zone over JDBC, the range pushed down as the query's WHERE, and lands it
straight in the target's table with the applier's version rule and the tombstones
(zonesync.copy.merge's statements, run by the JVM function
spark_jobs/jvm/zonesync/spark/ChunkCopier.java: no row passes through Spark's rows or a
Python worker), marking the chunk done in the same transaction. A re-run of the same run id skips
done chunks, so a kill -9 of the driver or an executor at any moment loses at most
the chunks in flight, which run again.

    spark-submit spark_jobs/full_copy.py --run-id R --source a --target b --table tenants \\
        --zone a=jdbc:mysql://127.0.0.1:23307/zonesync_app --zone b=jdbc:mysql://... --output /tmp/copy.json
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run by spark-submit as a file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from spark_jobs.common import add_zone_args, build_session, db_connect, jvm_endpoint, zone_props  # noqa: E402
from spark_jobs.copy_waves import Gate, Planner, copy_planner  # noqa: E402
from zonesync.sql_names import is_ident, quote  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="full_copy")
    parser.add_argument("--run-id", required=True, help="the copy's run id (its chunks' state is kept under it)")
    parser.add_argument("--source", required=True, help="zone the rows are read from")
    parser.add_argument("--target", required=True, help="zone the rows are merged into")
    parser.add_argument("--table", action="append", required=True, help="a table to copy (repeat, or a,b)")
    parser.add_argument("--chunk-rows", type=int, default=50_000, help="rows per key-range chunk")
    parser.add_argument(
        "--parallel",
        type=int,
        default=16,
        help="chunks per wave: one Spark job, its executors landing as many at once as they have cores",
    )
    parser.add_argument("--stop-after", type=int, default=0, help="(tests) stop after this many chunks")
    parser.add_argument("--meta", help="the meta store, mysql://user@host:port/db (password: ZONESYNC_META_PASSWORD)")
    parser.add_argument("--max-lag-s", type=float, default=0.0, help="wait while another zone lags more (0: never)")
    parser.add_argument(
        "--where-json",
        default="",
        help="(a migration's stock copy) {table: {where: SQL predicate, entity: column[, replace_key: run id]}}: "
        "only those rows are copied, never over another entity's row (replace_key: under new keys, through the "
        "target's key map of that migration run); no orphan search",
    )
    add_zone_args(parser)
    args = parser.parse_args(argv)
    try:
        args.where = json.loads(args.where_json) if args.where_json else {}
    except ValueError:
        parser.error("--where-json is not JSON: give {table: {where: SQL predicate, entity: column}}")
    if not isinstance(args.where, dict) or not all(
        isinstance(v, dict)
        and isinstance(v.get("where"), str)
        and v["where"]
        and isinstance(v.get("entity"), str)
        and (v.get("replace_key") is None or (isinstance(v["replace_key"], str) and v["replace_key"]))
        for v in args.where.values()
    ):
        parser.error("--where-json: give an object {table: {where: SQL predicate, entity: column}}")
    args.table = [t for value in args.table for t in value.split(",") if t]  # --table a,b too
    for t in args.table:
        if not is_ident(t):
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


def copy_wave(spark, src: tuple, dst: tuple, run_id: str, src_db: str, dst_db: str, table: str,
              columns: list[str], key: list[str], wave: list[dict], gate: str | None = None,
              where: dict | None = None, unique: bool = False, into: str | None = None) -> None:  # fmt: skip
    """Copy a wave's chunks, Spark partition i copying chunk i from the source straight
    into the target (ChunkCopier: read, then landed by zonesync.copy.merge's statements).
    `unique` (a stock copy of a table with other unique keys): every row lands through the
    upsert that changes only its own row (merge.upsert_statement)."""
    from zonesync.copy import merge

    jvm, gateway = spark._jvm, spark.sparkContext._gateway

    def endpoint(url: str, props: dict, session: str):
        return jvm_endpoint(spark, url, props, session, useBulkStmts="true")

    def array(kind, values: list):
        out = gateway.new_array(kind, len(values))
        for i, v in enumerate(values):
            out[i] = v
        return out

    def strings(values: list):
        return array(jvm.String, values)

    chunks = array(jvm.long, [int(c["chunk"]) for c in wave])
    key_at = array(jvm.int, merge.key_positions(columns, key))
    entity, rows = (where or {}).get("entity"), (where or {}).get("where")
    land_db, land = ("zonesync", into) if into else (dst_db, table)
    upsert = merge.upsert_statement(land_db, land, columns, entity, key if unique else None)
    # a stock copy locks and reads only its entities' rows of a chunk in the target (their
    # index), so a key another entity's row holds there is not among them: every row lands
    # through the guarded upsert, which leaves that row be (S004-36) and, unlike INSERT
    # IGNORE, fails on a value the target cannot take instead of landing it altered
    insert = upsert if unique or rows else merge.insert_statement(land_db, land, columns)
    copier = jvm.zonesync.spark.ChunkCopier(
        endpoint(*src, "time_zone='+00:00'"),
        # copied rows never reach the target's replicator (S001-13)
        endpoint(*dst, "time_zone='+00:00',skip_replication=1"),
        run_id, table, chunks,
        strings([merge.select_statement(src_db, table, columns, key, c["lo"], c["hi"], rows) for c in wave]),
        strings([merge.range_statement(land_db, land, key, c["lo"], c["hi"], rows) for c in wave]),
        strings([merge.cleanup_statement(land_db, land, key, c["lo"], c["hi"], rows) for c in wave]),
        key_at, insert, upsert,
        merge.LOCK_CHUNK, merge.ANY_TOMBSTONE, merge.MARK_DONE, 5000, gate,
    )  # fmt: skip
    # an RDD of the numbers 0..n-1, one per partition: no Spark SQL planning or codegen
    numbers = jvm.java.util.ArrayList()
    for i in range(len(wave)):
        numbers.add(i)
    spark.sparkContext._jsc.parallelize(numbers, len(wave)).foreachPartition(copier)


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
    db, keys = quote(url.rsplit("/", 1)[1]), ", ".join(quote(c) for c in key)
    props = {**props, "fetchsize": "10000"}
    first, source = quote(key[0]), f"{db}.{quote(table)}"
    bounds = spark.read.jdbc(
        url, f"(SELECT MIN({first}) AS lo, MAX({first}) AS hi FROM {source}) AS b", properties=props
    ).collect()[0]
    query = f"(SELECT {keys} FROM {source}) AS k"
    if bounds["lo"] is None or partitions <= 1:
        return spark.read.jdbc(url, query, properties=props)
    return spark.read.jdbc(url, query, column=key[0], lowerBound=int(bounds["lo"]),
                           upperBound=int(bounds["hi"]) + 1, numPartitions=partitions, properties=props)  # fmt: skip


def find_orphans(target_keys, source_keys, key: list[str]):
    """The target's keys the source lacks (pure)."""
    return target_keys.join(source_keys, on=key, how="left_anti")


class TableCopy:
    """One table's row copy (see the module's text): waves of `--parallel` chunks, each
    chunk read and landed by one Spark task."""

    def __init__(self, spark, args, zones: dict, table: str, log=print, staged=None):
        self.spark, self.args, self.zones, self.table, self.log, self.staged = spark, args, zones, table, log, staged
        (self.src_url, self.src_props), (self.dst_url, self.dst_props) = zones[args.source], zones[args.target]
        self.src_db, self.dst_db = self.src_url.rsplit("/", 1)[1], self.dst_url.rsplit("/", 1)[1]
        self.rows = self.done = 0
        self.where = (getattr(args, "where", None) or {}).get(table)  # a stock copy's {where, entity}

    def run(self) -> dict:
        from zonesync.copy import chunks as chunk_plan
        from zonesync.copy import replaced_stage
        from zonesync.copy.merge import stage_name

        args, table = self.args, self.table
        src, dst = db_connect(self.src_url, self.src_props), db_connect(self.dst_url, self.dst_props)
        planner = None
        try:
            entity = (self.where or {}).get("entity")
            self.key = chunk_plan.check_copyable(src, self.src_db, table, args.source, entity)
            chunk_plan.check_copyable(dst, self.dst_db, table, args.target, entity)
            self.unique = bool(chunk_plan.unique_keys(dst, self.dst_db, table))
            self.columns = [c for c, _ in _columns(dst, self.dst_db, table)]
            self.stage = stage_name(args.run_id, table)
            self.into = None
            if (self.where or {}).get("replace_key"):  # landed in a stage, then merged through the key map
                self.into = replaced_stage.stage_table(args.run_id, table)
                replaced_stage.create_stage(dst, self.dst_db, table, self.into)
            stored = chunk_plan.read(dst, args.run_id, table)
            rows = (self.where or {}).get("where")  # a stock copy: its entities' rows, planned by their index
            planner = copy_planner((self.src_url, self.src_props), (self.dst_url, self.dst_props), args.run_id, table,
                                   self.key, args.chunk_rows, stored, self.log, rows)  # fmt: skip
            self.done, self.started = sum(c["status"] == "done" for c in stored), time.monotonic()
            before = self._progress(dst)["rows"]
            self._waves(planner, dst)
            self.rows = self._progress(dst)["rows"] - before  # this attempt's
            seconds = round(time.monotonic() - self.started, 3)
            plan = planner.chunks
            complete = self.done == len(plan) and chunk_plan.complete(plan)
            orphans = None
            if complete and self.where is None and not _target_was_empty(dst, args.run_id, table):
                orphans = stage_orphans(self.spark, self.zones, args, table, self.key, self.stage)
            out = {"chunks": len(plan), "done": self.done, "rows": self.rows, "seconds": seconds, "orphans": orphans}
            if self.into and complete:
                out["merged"] = replaced_stage.merge(dst, self.where["replace_key"], self.dst_db, table, self.key[0],
                                                     self.columns, self.into)  # fmt: skip
                replaced_stage.drop_stage(dst, self.into)
            return out
        finally:
            if planner is not None:
                planner.close()
            src.close()
            dst.close()

    def _progress(self, dst) -> dict:
        """The table's chunks done of planned, rows, rate and ETA, as the target keeps them."""
        from zonesync.copy import chunks as chunk_plan

        return chunk_plan.summarize([self.table], chunk_plan.read(dst, self.args.run_id, self.table))[self.table]

    def _waves(self, planner: Planner, dst) -> None:
        from zonesync.copy.chunks import progress_text
        from zonesync.copy.throttle import wait_for_lag

        meta, left = _meta(self.args), self.args.stop_after or None
        while left is None or left > 0:
            wave = planner.next_wave(min(self.args.parallel, left or self.args.parallel))
            if not wave:
                return
            if meta is not None:
                wait_for_lag(meta, self.args.target, self.args.max_lag_s, self.log)
            t0 = time.monotonic()
            source, target = (self.src_url, self.src_props), (self.dst_url, self.dst_props)
            args = (self.spark, source, target, self.args.run_id, self.src_db, self.dst_db, self.table, self.columns,
                    self.key, wave)  # fmt: skip
            if self.staged is None:
                copy_wave(*args, where=self.where, unique=self.unique, into=self.into)
            else:  # (tests) the wave read, every earlier one landed, this one not yet
                with Gate(self.dst_url, self.dst_props, self.args.run_id) as gate:
                    gate.run(functools.partial(copy_wave, *args, gate=gate.sql, where=self.where, unique=self.unique,
                                               into=self.into),
                             functools.partial(self.staged, self.table, wave))  # fmt: skip
            self.done += len(wave)
            left = None if left is None else left - len(wave)
            planning = "" if planner.finished else ", still planning"
            self.log(f"{self.table}: {progress_text(self._progress(dst))} (a wave of {len(wave)} in "
                     f"{time.monotonic() - t0:.2f} s{planning})")  # fmt: skip


def _target_was_empty(conn, run_id: str, table: str) -> bool:
    """Whether start_incremental found the target without a row of `table`: then every row
    only the target holds came from the stream and is never stale, and the search for
    them (stage_orphans) is skipped."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT target_was_empty FROM zonesync.copy_tables WHERE run_id = %s AND table_name = %s", (run_id, table)
        )
        row = cur.fetchone()
    conn.commit()
    return bool(row and row[0])


def copy_table(spark, args, zones: dict, table: str, log=print, staged=None) -> dict:
    """Copy one table's pending chunks; `staged(table, wave)` (tests) runs once a wave is
    staged and every earlier one merged, before the wave is merged."""
    return TableCopy(spark, args, zones, table, log, staged).run()


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
