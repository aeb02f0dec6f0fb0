"""consistency_check: every zone's copy of each table against every other's, chunk
checksums first (computed by the zones themselves), then the rows of the chunks that
still differ once the zones have settled (docs/consistency-check.md).

    spark-submit --jars … spark_jobs/consistency_check.py --run-id R --table orders \\
        --zone a=jdbc:mysql://…/zonesync_app --zone b=… --zone c=… --output /tmp/check.json

The run's row in meta (zonesync.check.steps.record_start) holds the start: each zone's
binlog position, the cut, the rules version. Per table:

1. plan: key-range chunks over the first zone's primary key (the range tiling covers
   every key of every zone), stored in meta; a re-run reads the plan back;
2. checksums: waves of `--parallel` chunks, each chunk's numbers computed by every zone
   at once (ZoneQueries: one aggregate query per chunk and zone, two numbers back),
   stored per chunk as the wave ends (a killed job loses only its wave); the job waits
   between waves while a zone's replication lags more than `--max-lag-s`;
3. settle: chunks that differ are looked at again once every zone has applied every
   other zone up to the start (a difference from a write in flight is gone by then);
4. rows: the chunks still differing are read row by row from every zone and diffed; a
   differing key written or deleted after the cut is in flight and not reported, the
   others are stored with the zone that is right (the owner of the key's ZSID).

Then Great Expectations validates every table's chunks x zones (check_expectations) and
updates its Data Docs. The result file: {"tables": {table: ...}, "expectations": ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run by spark-submit as a file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.check_table import TableCheck  # noqa: E402
from spark_jobs.check_zones import zone_endpoints  # noqa: E402
from spark_jobs.common import add_zone_args, build_session, meta_config, zone_props  # noqa: E402
from zonesync.sql_names import is_ident  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="consistency_check")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--table", action="append", required=True, help="a table to check (repeat, or a,b)")
    parser.add_argument("--parallel", type=int, default=16, help="chunks per wave (each asked of every zone)")
    parser.add_argument("--rows", action=argparse.BooleanOptionalAction, default=True,
                        help="read and diff the rows of chunks that differ (default on)")  # fmt: skip
    parser.add_argument("--settle-timeout-s", type=float, default=300.0)
    parser.add_argument("--max-lag-s", type=float, default=5.0, help="wait between waves while a zone lags more")
    parser.add_argument("--stop-after", type=int, default=0, help=argparse.SUPPRESS)  # tests: waves, then stop
    parser.add_argument("--docs", help="where the Great Expectations project (gx/) lives (default: beside --output)")
    parser.add_argument("--meta", help="mysql://user@host:port/db of the meta store (default: the dev env's)")
    add_zone_args(parser)
    args = parser.parse_args(argv)
    args.table = [t for value in args.table for t in value.split(",") if t]  # the DAG passes "a,b"
    for t in args.table:
        if not is_ident(t):
            parser.error(f"--table {t!r} is not a plain SQL identifier")
    if not 1 <= args.parallel <= 256:
        parser.error(f"--parallel {args.parallel}: use 1..256")
    if args.max_lag_s < 0 or args.settle_timeout_s <= 0:
        parser.error("--max-lag-s: 0 or more; --settle-timeout-s: more than 0")
    return args


def start(args, log=print) -> tuple:
    """What the job does before it needs Spark: the run read from meta, the zones
    checked against it, the first table's check started (its plan under way)."""
    from zonesync.check.store import CheckStore

    zones = zone_props(args)
    store = CheckStore(meta_config(args))
    check = store.require(args.run_id)
    missing = [z for z in check.zones if z not in zones]
    if missing:
        raise SystemExit(f"--zone: the check {args.run_id} covers {', '.join(missing)} too; give --zone for each")
    zones = {z: zones[z] for z in check.zones}
    first = TableCheck(args, zones, store, check, args.table[0], log).start()
    return zones, store, check, first


def check_tables(spark, args, log=print, started_job: tuple | None = None) -> tuple[dict, tuple]:
    """Every table's checksums, settle and rows: ({table: result}, the started job)."""
    job = started_job or start(args, log)
    zones, store, check, first = job
    try:
        endpoints = zone_endpoints(spark, zones)
    except BaseException:
        first.close()
        raise
    result = {}
    for table in args.table:
        began = time.monotonic()
        one = first if table == first.table else TableCheck(args, zones, store, check, table, log).start()
        result[table] = one.run(spark, endpoints)
        log(f"{table}: checked in {time.monotonic() - began:.1f} s: {json.dumps(result[table]['outcome'])}")
    return result, job


def validate_and_write(args, job: tuple, result: dict, log=print) -> dict:
    """Great Expectations over the stored chunks, then the result file."""
    from spark_jobs import check_expectations

    zones, store = job[0], job[1]
    began = time.monotonic()
    rows = check_expectations.facts({t: store.chunks(args.run_id, t) for t in args.table}, list(zones))
    docs = Path(args.docs) if getattr(args, "docs", None) else Path(args.output).parent
    expectations = check_expectations.validate(rows, docs, args.run_id)
    verdict = "passed" if expectations["success"] else "FAILED"
    log(f"Great Expectations: {verdict} in {time.monotonic() - began:.1f} s; Data Docs {expectations['data_docs']}")
    out = {"tables": result, "expectations": expectations}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2, default=str))
    return out


def run(spark, args, log=print) -> dict:
    result, job = check_tables(spark, args, log)
    return validate_and_write(args, job, result, log)


def _in_background(fn, *args) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args, daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    job = start(args)  # the first table's plan goes on while the session starts
    began = time.monotonic()
    try:
        spark = build_session("zonesync-consistency-check")
    except BaseException:
        job[3].close()
        raise
    print(f"Spark session in {time.monotonic() - began:.1f} s", flush=True)
    # Great Expectations imports in about 2 s, on one core: while the zones compute
    from spark_jobs import check_expectations

    importing = _in_background(check_expectations.import_gx)
    try:
        result, job = check_tables(spark, args, started_job=job)
    finally:
        stopping = _in_background(spark.stop)  # the session stops while the results are validated
    importing.join()
    validate_and_write(args, job, result)
    stopping.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
