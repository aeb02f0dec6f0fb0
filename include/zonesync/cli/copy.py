"""`zonesync copy | copy status RUN_ID | copies`: online full copies from the command line.

A copy always runs as the `full_copy` DAG, triggered through Airflow's REST API, so a
run started here has the same task logs, retries and history in the UI as one started
from the trigger form. The command checks its arguments first (one line naming the
flag and the fix; nothing is triggered), then follows the run; progress (chunks done
of total, rows) and the recorded start positions come from meta and the target zone.
"""

from __future__ import annotations

from zonesync.cli import common

DAG_ID = "full_copy"


def _fail(message: str) -> int:
    return common.fail(message, "zonesync copy")


_FLAGS = {"from_zone": "--from", "to_zone": "--to"}


def _conf(args) -> dict | str:
    """The DAG's conf (console.actions, as the HTTP API builds it), or "--flag: why"."""
    from zonesync.console.actions import Refused, copy_conf

    missing = [flag for flag, value in (("--from", args.from_zone), ("--to", args.to_zone), ("--reason", args.reason))
               if not value]  # fmt: skip
    if missing:
        return f"{', '.join(missing)} required (example: --from a --to b --reason 'rebuild b after disk loss')"
    tables = [t for value in args.tables or () for t in value.split(",") if t]
    body = {"from_zone": args.from_zone, "to_zone": args.to_zone, "tables": tables, "mode": args.mode,
            "reason": args.reason, "chunk_rows": args.chunk_rows, "parallel": args.parallel}  # fmt: skip
    try:
        return copy_conf(body, [])
    except Refused as exc:
        return common.flag_error(exc, _FLAGS)


def cmd_copy(args) -> int:
    if args.command:
        if args.command[0] == "status" and len(args.command) == 2:
            return _status(args.command[1])
        return _fail(f"unknown arguments {' '.join(args.command)!r}: use `zonesync copy status RUN_ID`")
    conf = _conf(args)
    if isinstance(conf, str):
        return _fail(conf)
    what = f"{conf['from_zone']} -> {conf['to_zone']} ({conf['mode']})"
    run_id, state = common.run_dag(DAG_ID, conf, what, args.timeout, args.no_follow, "copy", width=18)
    if run_id is None:
        return _fail(state)
    if state is None:
        return 0
    _status(run_id)
    return 0 if state == "success" else 1


def _status(run_id: str) -> int:
    from zonesync.copy import steps
    from zonesync.copy.chunks import progress_text
    from zonesync.copy.request import CopyRequest
    from zonesync.copy.store import CopyStore

    run = CopyStore(common.meta()).get(run_id)
    if run is None:
        return _fail(f"no copy with run id {run_id!r} (refused before preflight, or unknown): `zonesync copies`")
    print(f"copy {run.run_id} ({run.status}, {run.phase}): {run.source_zone} -> {run.target_zone} ({run.mode})")
    print(f"  by {run.actor}: {run.reason}")
    ctx = steps.CopyContext(
        common.meta(), run_id, CopyRequest(run.source_zone, run.target_zone, run.tables), common.zone_conn, partitions=0
    )
    try:
        for table, p in steps.progress(ctx).items():
            print(f"  {table:<20} {progress_text(p)}")
    except Exception as exc:  # noqa: BLE001 - the target may be down: say so, show the rest
        print(f"  progress: the target zone could not be read ({exc})")
    for source, parts in sorted(run.positions().items()):
        text = ", ".join(f"{p}:{v[0]}@{v[1]}" for p, v in sorted(parts.items(), key=lambda kv: int(kv[0])))
        print(f"  start {source}: {text[:300]} (partition:LSN@offset)")
    if run.detail:
        print(f"  outcome: {run.detail}")
    return 0 if run.status in ("succeeded", "running") else 1


def cmd_copies(args) -> int:
    from zonesync.copy.store import CopyStore

    rows = CopyStore(common.meta()).history(args.limit)
    if not rows:
        print("no copies yet: `zonesync copy --from a --to b --reason ...`")
        return 0
    print(f"{'started':<19}  {'status':<11} {'phase':<13} {'move':<8} run id / reason")
    for c in rows:
        move = f"{c.source_zone}->{c.target_zone}"
        print(f"{c.created_at:%Y-%m-%d %H:%M:%S}  {c.status:<11} {c.phase:<13} {move:<8} {c.run_id}")
        print(f"{'':<19}  {'':<11} by {c.actor}: {c.reason}  [{', '.join(c.tables)}]")
    return 0


def register(sub) -> None:
    cp = sub.add_parser(
        "copy",
        help="online full copy of tables into a zone (runs the full_copy DAG and follows it); `copy status RUN_ID`",
    )
    cp.add_argument("command", nargs="*", help="empty to start a copy, or: status RUN_ID")
    cp.add_argument("--from", dest="from_zone", help="the healthy zone the rows are read from")
    cp.add_argument("--to", dest="to_zone", help="the zone rebuilt, added or repaired")
    cp.add_argument("--tables", action="append", help="tables to copy (repeat, or a,b); default: every replicated one")
    cp.add_argument("--mode", default="rebuild", help="rebuild | add-zone | repair")
    cp.add_argument("--reason", help="why (kept in the history)")
    cp.add_argument("--chunk-rows", type=int, default=50_000, help="rows per key-range chunk")
    cp.add_argument(
        "--parallel",
        type=int,
        default=16,
        help="chunks per wave: one Spark job, its executors landing as many at once as they have cores",
    )
    cp.add_argument("--timeout", type=float, default=86400.0, help="stop following after (s)")
    cp.add_argument("--no-follow", action="store_true", help="trigger and return the run id")
    cp.set_defaults(func=cmd_copy)
    hist = sub.add_parser("copies", help="the copy history: who, when, which zones and tables, the outcome")
    hist.add_argument("--limit", type=int, default=20)
    hist.set_defaults(func=cmd_copies)
