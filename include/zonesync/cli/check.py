"""`zonesync check | check status RUN_ID | check report RUN_ID | checks`: consistency
checks from the command line.

A check always runs as the `consistency_check` DAG, triggered through Airflow's REST
API, so a run started here has the same task logs, retries and history as a scheduled
one. The command checks its arguments first (one line naming the flag and the fix;
nothing is triggered), then follows the run; `report` prints what differs (and writes
it as JSON or HTML with --json / --html).
"""

from __future__ import annotations

from pathlib import Path

from zonesync.cli import common

DAG_ID = "consistency_check"


def _fail(message: str) -> int:
    return common.fail(message, "zonesync check")


def _names(values) -> tuple[str, ...]:
    return tuple(n for value in values or () for n in value.split(",") if n)


_FLAGS = {"rows": "--no-rows"}


def _conf(args) -> dict | str:
    """The DAG's conf (console.actions, as the HTTP API builds it), or "--flag: why"."""
    from zonesync.console.actions import Refused, check_conf

    body = {"zones": _names(args.zones), "tables": _names(args.tables), "chunk_rows": args.chunk_rows,
            "rows": not args.no_rows, "repair": args.repair, "reason": args.reason,
            "parallel": args.parallel}  # fmt: skip
    try:
        return check_conf(body, [])
    except Refused as exc:
        return common.flag_error(exc, _FLAGS)


def cmd_check(args) -> int:
    if args.command:
        if args.command[0] in ("status", "report") and len(args.command) == 2:
            return _report(args.command[1], full=args.command[0] == "report", json_file=args.json, html_file=args.html)
        return _fail(f"unknown arguments {' '.join(args.command)!r}: use `zonesync check status|report RUN_ID`")
    conf = _conf(args)
    if isinstance(conf, str):
        return _fail(conf)
    what = f"zones {', '.join(conf['zones']) or 'all'}, tables {', '.join(conf['tables']) or 'all replicated'}"
    run_id, state = common.run_dag(DAG_ID, conf, what, args.timeout, args.no_follow, "check", width=14)
    if run_id is None:
        return _fail(state)
    if state is None:
        return 0
    _report(run_id, full=True)
    return 0 if state == "success" else 1


def _report(run_id: str, full: bool, json_file: str | None = None, html_file: str | None = None) -> int:
    import json

    from zonesync.check import report
    from zonesync.check.store import CheckStore

    if CheckStore(common.meta()).get(run_id) is None:
        return _fail(f"no check with run id {run_id!r} (refused before preflight, or unknown): `zonesync checks`")
    doc = report.build(common.meta(), run_id, limit=10_000 if full else 0)
    print(report.text(doc))
    if json_file:
        Path(json_file).write_text(json.dumps(doc, indent=2, default=str))
    if html_file:
        Path(html_file).write_text(report.page(doc))
    return 0 if doc["status"] in ("succeeded", "running") else 1


def cmd_checks(args) -> int:
    from zonesync.check.store import CheckStore

    rows = CheckStore(common.meta()).history(args.limit)
    if not rows:
        print("no checks yet: `zonesync check --reason ...`, or wait for the hourly schedule")
        return 0
    print(f"{'started':<19}  {'status':<11} {'phase':<10} run id / outcome")
    for c in rows:
        print(f"{c.created_at:%Y-%m-%d %H:%M:%S}  {c.status:<11} {c.phase:<10} {c.run_id}")
        print(f"{'':<19}  {'':<11} by {c.actor}: {c.reason}  [{', '.join(c.tables)}] {c.detail or ''}")
    return 0


def register(sub) -> None:
    cp = sub.add_parser("check", help="compare every zone's rows (runs the consistency_check DAG and follows it)")
    cp.add_argument("command", nargs="*", help="empty to start a check, or: status RUN_ID | report RUN_ID")
    cp.add_argument("--zones", action="append", help="zones to compare (repeat, or a,b); default: every zone")
    cp.add_argument("--tables", action="append", help="tables to check (repeat, or a,b); default: every replicated one")
    cp.add_argument("--chunk-rows", type=int, default=100_000, help="rows per key-range chunk")
    cp.add_argument("--parallel", type=int, default=16, help="chunks per wave, each asked of every zone at once")
    cp.add_argument("--no-rows", action="store_true", help="checksums only: do not read the rows of differing chunks")
    cp.add_argument("--repair", action="store_true",
                    help="set each differing row to its owner's row where a zone has it wrong")  # fmt: skip
    cp.add_argument("--reason", default="asked from the command line", help="why (kept in the history)")
    cp.add_argument("--timeout", type=float, default=86400.0, help="stop following after (s)")
    cp.add_argument("--no-follow", action="store_true", help="trigger and return the run id")
    cp.add_argument("--json", help="report: also write it as JSON to this file")
    cp.add_argument("--html", help="report: also write it as an HTML page to this file")
    cp.set_defaults(func=cmd_check)
    hist = sub.add_parser("checks", help="the check history: when, who, which tables, the outcome")
    hist.add_argument("--limit", type=int, default=20)
    hist.set_defaults(func=cmd_checks)
