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


class TableCopy:
    """One table's row copy (see the module's text). Waves overlap: while the target
    merges wave N (a thread of the driver, on its own connection), Spark reads and
    stages wave N+1."""

    def __init__(self, spark, args, zones: dict, table: str, log=print, staged=None):
        self.spark, self.args, self.zones, self.table, self.log, self.staged = spark, args, zones, table, log, staged
        (self.src_url, self.src_props), (self.dst_url, self.dst_props) = zones[args.source], zones[args.target]
        self.src_db, self.dst_db = self.src_url.rsplit("/", 1)[1], self.dst_url.rsplit("/", 1)[1]
        self.rows = self.done = 0

    def run(self) -> dict:
        from concurrent.futures import ThreadPoolExecutor

        from zonesync.copy import chunks as chunk_plan
        from zonesync.copy.merge import drop_stage, stage_name

        args, table = self.args, self.table
        src, dst = db_connect(self.src_url, self.src_props), db_connect(self.dst_url, self.dst_props)
        merger = ThreadPoolExecutor(1, thread_name_prefix="merge")
        try:
            self.key = chunk_plan.check_copyable(src, self.src_db, table, args.source)
            chunk_plan.check_copyable(dst, self.dst_db, table, args.target)
            self.columns = [c for c, _ in _columns(dst, self.dst_db, table)]
            self.plan = chunk_plan.ensure_plan(dst, src, args.run_id, table, self.key, args.chunk_rows)
            self.stage = stage_name(args.run_id, table)
            drop_stage(dst, self.stage, waves_only=True)  # what a killed attempt staged
            pending = [c for c in self.plan if c["status"] != "done"]
            self.done, self.started = len(self.plan) - len(pending), time.monotonic()
            self._waves(pending[: args.stop_after] if args.stop_after else pending, dst, merger)
            seconds = round(time.monotonic() - self.started, 3)
            complete = self.done == len(self.plan)
            orphans = stage_orphans(self.spark, self.zones, args, table, self.key, self.stage) if complete else None
            return {"chunks": len(self.plan), "done": self.done, "rows": self.rows, "seconds": seconds,
                    "orphans": orphans}  # fmt: skip
        finally:
            merger.shutdown(wait=True)
            src.close()
            dst.close()

    def _waves(self, pending: list[dict], dst, merger) -> None:
        from zonesync.copy.merge import create_stage, wave_stage
        from zonesync.copy.throttle import wait_for_lag

        meta, merging = _meta(self.args), None
        for start in range(0, len(pending), self.args.parallel):
            wave = pending[start : start + self.args.parallel]
            if meta is not None:
                wait_for_lag(meta, self.args.target, self.args.max_lag_s, self.log)
            stage = wave_stage(self.stage, wave[0]["chunk"])
            with dst.cursor() as cur:
                for stmt in create_stage(self.dst_db, self.table, stage):
                    cur.execute(stmt)
            t0 = time.monotonic()
            df = transform(extract(self.spark, self.src_url, self.src_props, self.src_db, self.table, self.key, wave),
                           self.columns)  # fmt: skip
            load(df, self.dst_url, self.dst_props, stage)
            if self.staged is not None:  # (tests) every earlier wave merged, this one staged
                if merging is not None:
                    self._merged(*merging.result())
                    merging = None
                self.staged(self.table, wave)
            staged_s = time.monotonic() - t0
            if merging is not None:
                self._merged(*merging.result())
            merging = merger.submit(self._merge_wave, wave, stage, staged_s)
        if merging is not None:
            self._merged(*merging.result())

    def _merge_wave(self, wave: list[dict], stage: str, staged_s: float) -> tuple[int, int, float, float]:
        """(rows, chunks, seconds staging took, seconds merging took): the merge thread's."""
        from zonesync.copy.merge import drop_table, merge_chunk_retrying

        t0, rows = time.monotonic(), 0
        conn = db_connect(self.dst_url, self.dst_props)
        try:
            for c in wave:
                rows += merge_chunk_retrying(conn, self.dst_db, self.args.run_id, self.table, stage, self.columns,
                                             self.key, c["chunk"]) or 0  # fmt: skip
            drop_table(conn, stage)
        finally:
            conn.close()
        return rows, len(wave), staged_s, time.monotonic() - t0

    def _merged(self, rows: int, chunks: int, staged_s: float, merged_s: float) -> None:
        self.rows, self.done = self.rows + rows, self.done + chunks
        took = time.monotonic() - self.started
        self.log(
            f"{self.table}: {self.done}/{len(self.plan)} chunks, {self.rows} rows in {took:.1f} s "
            f"({self.rows / max(took, 1e-9):.0f} rows/s; a wave staged in {staged_s:.2f} s, merged in {merged_s:.2f} s)"
        )


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
