"""`zonesync migrate | migrate status RUN_ID | migrations`: a tenant's locating entities
moved to another zone, from the command line (docs/migration.md).

A migration always runs as the `le_migration` DAG, triggered through Airflow's REST API,
so it has the same task logs, retries and history as one started from the trigger form
or `POST /zonesync/api/v1/tenants/{tenant}/migrations`. The request is checked against
meta first (steps.movable: one line naming the flag and the fix; nothing is triggered),
then the run is followed; its state comes from meta's `migrations` row.
"""

from __future__ import annotations

import json

from zonesync.cli import common

DAG_ID = "le_migration"
FLAGS = {"tenant": "--tenant", "to": "--to", "mode": "--mode", "reason": "--reason", "les": "--le"}


def _fail(message: str) -> int:
    return common.fail(message, "zonesync migrate")


def _conf(args) -> dict | str:
    from zonesync.meta.db import MetaError
    from zonesync.migrate.request import MigrationRefused, MigrationRequest, parse_les
    from zonesync.migrate.steps import movable

    missing = [flag for flag, value in (("--tenant", args.tenant), ("--to", args.to_zone), ("--reason", args.reason))
               if not value]  # fmt: skip
    if missing:
        return f"{', '.join(missing)} required (example: --tenant 7 --to b --reason 'customer moved to the EU')"
    from zonesync.migrate.gate import GateSpecError, parse_window

    try:
        parse_window(args.stop_window)
    except GateSpecError as exc:
        return "--stop-window" + str(exc).removeprefix("stop_window_utc")
    bounds = (("--max-lag-s", args.max_lag_s, 0, "must not be negative"),
              ("--gate-timeout", args.gate_timeout, 1, "at least 1 (seconds)"),
              ("--plan2-max-rows", args.plan2_max_rows, 0, "must not be negative"),
              ("--stock-chunk-rows", args.stock_chunk_rows, 100, "at least 100"))  # fmt: skip
    for flag, value, least, words in bounds:
        if value < least:
            return f"{flag}: {words}"
    try:
        req = MigrationRequest("tenant", args.tenant, args.to_zone, args.mode, args.reason, parse_les(args.le))
        movable(common.meta(), req)
    except (MigrationRefused, MetaError) as exc:  # "field: why" -> "--flag: why"
        field, _, why = str(exc).partition(": ")
        return f"{FLAGS.get(field, field)}: {why}" if why else str(exc)
    return {"tenant": req.be_id, "to_zone": req.target_zone, "mode": req.mode, "reason": req.reason,
            "les": [f"{t}:{i}" for t, i in req.les],
            "ack_timeout_s": args.ack_timeout, "sync_timeout_s": args.sync_timeout, "max_lag_s": args.max_lag_s,
            "stop_window_utc": args.stop_window, "gate_timeout_s": args.gate_timeout,
            "plan2_max_rows": args.plan2_max_rows, "keep_source_copy": args.keep_source_copy,
            "stock_chunk_rows": args.stock_chunk_rows}  # fmt: skip


def cmd_migrate(args) -> int:
    if args.command:
        if args.command[0] == "status" and len(args.command) == 2:
            return _status(args.command[1])
        return _fail(f"unknown arguments {' '.join(args.command)!r}: use `zonesync migrate status RUN_ID`")
    conf = _conf(args)
    if isinstance(conf, str):
        return _fail(conf)
    what = f"tenant {conf['tenant']} -> {conf['to_zone']} ({conf['mode']})"
    run_id, state = common.run_dag(DAG_ID, conf, what, args.timeout, args.no_follow, "migrate")
    if run_id is None:
        return _fail(state)
    if state is None:
        return 0
    _status(run_id)
    return 0 if state == "success" else 1


def _status(run_id: str) -> int:
    from zonesync.migrate.store import MigrationStore

    run = MigrationStore(common.meta()).get(run_id)
    if run is None:
        return _fail(f"no migration with run id {run_id!r} (refused before preflight, or unknown): "
                     "`zonesync migrations`")  # fmt: skip
    print(f"migration {run.run_id} ({run.status}, {run.phase}): {run.be_type} {run.be_id} "
          f"{run.source_zone} -> {run.target_zone} ({run.mode})")  # fmt: skip
    print(f"  by {run.actor}: {run.reason}")
    print(f"  locating entities: {', '.join(f'{t} {i}' for t, i in run.les)}")
    if run.status == "running":
        from zonesync.console.access import zone_conn
        from zonesync.console.migration_progress import progress, text

        print(f"  progress: {text(progress(common.meta(), run, zone_conn))}")
    if run.window_ms is not None:
        print(f"  stop-write window: {run.window_ms:.0f} ms")
    if run.detail:
        print(f"  outcome: {run.detail}")
    return 0 if run.status in ("succeeded", "running") else 1


def cmd_migrations(args) -> int:
    from zonesync.migrate.store import MigrationStore

    rows = MigrationStore(common.meta()).history(args.limit, *(("tenant", args.tenant) if args.tenant else ()))
    if args.json:
        print(json.dumps([r.to_doc() for r in rows], indent=1))
        return 0
    if not rows:
        print("no migrations yet: `zonesync migrate --tenant 7 --to b --reason ...`")
        return 0
    print(f"{'started':<19}  {'status':<11} {'phase':<12} {'tenant':<10} {'move':<6} {'window':>9}  run id")
    for m in rows:
        window = "" if m.window_ms is None else f"{m.window_ms:.0f} ms"
        print(f"{m.created_at:%Y-%m-%d %H:%M:%S}  {m.status:<11} {m.phase:<12} {m.be_id:<10} "
              f"{m.source_zone + '->' + m.target_zone:<6} {window:>9}  {m.run_id}")  # fmt: skip
    if args.tenant:
        _where_les_are(args.tenant, MigrationStore(common.meta()).history(1000, "tenant", args.tenant))
    return 0


def _where_les_are(tenant: str, rows) -> None:
    """Each locating entity of the tenant, its zone and the run that last moved it there
    (S004-30: a tenant moved LE by LE; `rows` newest first, its last 1,000 runs)."""
    from zonesync.meta.entities import EntityRegistry

    found = EntityRegistry(common.meta()).biz("tenant", tenant)
    if found is None:
        return
    biz, les = found
    print(f"tenant {tenant} (zone {biz.zone}), its locating entities:")
    for le in les:
        moved = next((m for m in rows if m.status == "succeeded" and (le.le_type, le.le_id) in m.les), None)
        how = f", moved by {moved.run_id}" if moved is not None else ""
        stopped = ", stopped" if le.stop_write else ""
        print(f"  {le.le_type} {le.le_id}: zone {le.zone}{stopped}{how}")


def register(sub) -> None:
    mg = sub.add_parser("migrate", help="move a tenant to another zone (runs the le_migration DAG and follows it); "
                                        "`migrate status RUN_ID`")  # fmt: skip
    mg.add_argument("command", nargs="*", help="empty to start a migration, or: status RUN_ID")
    mg.add_argument("--tenant", help="the tenant (biz entity) to move, with every locating entity it owns")
    mg.add_argument("--le", action="append", default=[], metavar="TYPE:ID",
                    help="only this locating entity of the tenant (repeat): a tenant too big to stop at once moves "
                         "in several runs, each atomic; default: all of them")  # fmt: skip
    mg.add_argument("--to", dest="to_zone", help="the zone it moves to")
    mg.add_argument("--mode", default="plan1", help="plan1 (default) | plan2; dual-write is refused")
    mg.add_argument("--reason", help="why (kept with every version the migration publishes)")
    mg.add_argument("--ack-timeout", type=float, default=10.0, help="how long each push waits for the guards' acks")
    mg.add_argument("--sync-timeout", type=float, default=120.0, help="how long the target may take to catch up")
    mg.add_argument("--max-lag-s", type=float, default=5.0, help="stop writes only while the target lags less")
    mg.add_argument("--stop-window", default="", help="stop writes only inside this UTC window, HH:MM-HH:MM")
    mg.add_argument("--gate-timeout", type=float, default=3600.0, help="roll back if the gate stays closed this long")
    mg.add_argument("--plan2-max-rows", type=int, default=100_000, help="plan2 is refused above this many rows")
    mg.add_argument("--keep-source-copy", action="store_true", help="keep the source's resident rows after the move")
    mg.add_argument("--stock-chunk-rows", type=int, default=50_000, help="rows per chunk of the stock copy")
    mg.add_argument("--timeout", type=float, default=3600.0, help="stop following after (s)")
    mg.add_argument("--no-follow", action="store_true", help="trigger and return the run id")
    mg.set_defaults(func=cmd_migrate)
    hist = sub.add_parser("migrations", help="the migration history: tenant, zones, status, stop-write window")
    hist.add_argument("--tenant", help="only this tenant's")
    hist.add_argument("--limit", type=int, default=20)
    hist.add_argument("--json", action="store_true", help="as JSON, as the HTTP API returns them")
    hist.set_defaults(func=cmd_migrations)
