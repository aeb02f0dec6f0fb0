"""`zonesync switch | switch status RUN_ID | switches`: zone switches from the command line.

A switch always runs as the `zone_switch` DAG, triggered through Airflow's REST
API, so a run started here has the same task logs, retries and history in the UI
as one started from the trigger form. The command follows the run and prints
each step as it moves; the outcome and the write-blocked window come from the
switch history in meta.
"""

from __future__ import annotations

from zonesync.cli import common

DAG_ID = "zone_switch"


def _fail(message: str) -> int:
    return common.fail(message, "zonesync switch")


_FLAGS = {"from_zone": "--from", "to_zone": "--to"}


def _conf(args) -> dict | str:
    """The DAG's conf (console.actions, as the HTTP API builds it), or "--flag: why"."""
    from zonesync.console.actions import Refused, switch_conf

    missing = [flag for flag, value in (("--zsids", args.zsids), ("--from", args.from_zone), ("--to", args.to_zone),
                                         ("--reason", args.reason)) if not value]  # fmt: skip
    if missing:
        return f"{', '.join(missing)} required (example: --zsids 0-99 --from a --to b --reason 'move EU tenants')"
    body = {"zsids": args.zsids, "from_zone": args.from_zone, "to_zone": args.to_zone, "reason": args.reason,
            "ack_timeout_s": args.ack_timeout, "max_txn_ms": args.max_txn_ms, "lag_threshold_s": args.lag_threshold,
            "sync_timeout_s": args.sync_timeout}  # fmt: skip
    try:
        return switch_conf(body, [])
    except Refused as exc:
        return common.flag_error(exc, _FLAGS)


def cmd_switch(args) -> int:
    if args.command:
        if args.command[0] == "status" and len(args.command) == 2:
            return _status(args.command[1])
        return _fail(f"unknown arguments {' '.join(args.command)!r}: use `zonesync switch status RUN_ID`")
    conf = _conf(args)
    if isinstance(conf, str):
        return _fail(conf)
    run_id, state = common.run_dag(
        DAG_ID,
        {**conf, "actor": args.actor} if args.actor else conf,
        f"ZSIDs {conf['zsids']} {conf['from_zone']} -> {conf['to_zone']}",
        args.timeout,
        args.no_follow,
        "switch",
    )
    if run_id is None:
        return _fail(state)
    if state is None:
        return 0
    _summary(run_id)
    return 0 if state == "success" else 1


def _summary(run_id: str) -> None:
    from zonesync.switch.store import SwitchStore

    sw = SwitchStore(common.meta()).get(run_id)
    if sw is None:
        print("no switch recorded in meta for this run (refused before preflight)")
        return
    detail = sw.detail or ""
    if sw.window_ms is not None and "window" not in detail:
        detail += f" (write-blocked window {sw.window_ms:.0f} ms)"
    print(f"{sw.status}: {detail.strip()}")


def _status(run_id: str) -> int:
    from zonesync.switch.store import SwitchStore

    store = SwitchStore(common.meta())
    sw = store.get(run_id)
    if sw is None:
        return _fail(f"no switch with run id {run_id!r}: `zonesync switches` lists them")
    print(f"switch {sw.run_id} ({sw.status}): ZSIDs {sw.zsids} {sw.from_zone} -> {sw.to_zone}")
    print(f"  by {sw.actor}: {sw.reason}")
    versions = [
        f"{name} v{v}"
        for name, v in (
            ("recorded", sw.recorded_version),
            ("block", sw.block_version),
            ("reshard", sw.reshard_version),
            ("active", sw.active_version),
            ("rollback", sw.rollback_version),
        )
        if v is not None
    ]
    print(f"  versions: {', '.join(versions) or 'none published'}")
    if sw.sync_file:
        print(f"  sync position P: {sw.sync_file}:{sw.sync_pos}")
    if sw.window_ms is not None:
        print(f"  write-blocked window: {sw.window_ms:.0f} ms")
    for s in store.steps(sw.id):
        took = (s["finished_at"] - s["started_at"]).total_seconds() if s["finished_at"] else None
        took_text = f"{took:7.2f} s" if took is not None else "running"
        tries = f" (attempt {s['attempt']})" if s["attempt"] > 1 else ""
        print(f"  {s['step']:<14} {s['status']:<8} {took_text}{tries}  {(s['detail'] or '')[:160]}")
    gates = store.gates(sw.id)
    if gates:  # started with block, each waited there for its predecessor's stamp (docs/switch.md)
        waits = []
        for task, took, state in gates:
            text = "waiting" if took is None else f"{took:.2f} s"
            waits.append(f"{task} {text}" if state == "passed" else f"{task} {text} ({state})")
        print(f"  gate waits: {', '.join(waits)}")
    if sw.detail:
        print(f"  outcome: {sw.detail}")
    return 0 if sw.status in ("succeeded", "running") else 1


def cmd_switches(args) -> int:
    from zonesync.switch.store import SwitchStore

    rows = SwitchStore(common.meta()).history(args.limit)
    if not rows:
        print("no switches yet: `zonesync switch --zsids 0-99 --from a --to b --reason ...`")
        return 0
    print(f"{'started':<19}  {'status':<11} {'zsids':<14} {'move':<8} {'window':>9}  run id / reason")
    for sw in rows:
        window = f"{sw.window_ms:.0f} ms" if sw.window_ms is not None else "-"
        move = f"{sw.from_zone}->{sw.to_zone}"
        print(f"{sw.created_at:%Y-%m-%d %H:%M:%S}  {sw.status:<11} {sw.zsids:<14} {move:<8} {window:>9}  {sw.run_id}")
        print(f"{'':<19}  {'':<11} by {sw.actor}: {sw.reason}")
    return 0


def register(sub) -> None:
    sw = sub.add_parser(
        "switch",
        help="move ZSIDs between zones (runs the zone_switch DAG and follows it); `switch status RUN_ID`",
    )
    sw.add_argument("command", nargs="*", help="empty to start a switch, or: status RUN_ID")
    sw.add_argument("--zsids", help="ZSIDs to move, e.g. 0-99,200")
    sw.add_argument("--from", dest="from_zone", help="the zone that owns them now")
    sw.add_argument("--to", dest="to_zone", help="the zone that will own them")
    sw.add_argument("--reason", help="why (kept in the history)")
    sw.add_argument("--ack-timeout", type=float, default=10.0, help="seconds each push waits for guard acks")
    sw.add_argument("--max-txn-ms", type=int, default=500, help="margin waited after the BLOCK acks (ms)")
    sw.add_argument("--lag-threshold", type=float, default=5.0, help="preflight refuses above this lag (s)")
    sw.add_argument("--sync-timeout", type=float, default=120.0, help="wait_sync gives up after (s)")
    sw.add_argument("--actor", help="who asks (default: the Airflow user)")
    sw.add_argument("--timeout", type=float, default=900.0, help="stop following after (s)")
    sw.add_argument("--no-follow", action="store_true", help="trigger and return the run id")
    sw.set_defaults(func=cmd_switch)
    hist = sub.add_parser("switches", help="the switch history: who, when, which ZSIDs, the write-blocked window")
    hist.add_argument("--limit", type=int, default=20)
    hist.set_defaults(func=cmd_switches)
