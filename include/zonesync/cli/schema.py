"""`zonesync schema apply | diff | holds | resume | log`: one DDL statement rolled through
every zone (the schema_change DAG), the tables' definitions across zones, the tables an
applier holds for definitions that disagree with their events, and the DDL the
replicators read (docs/schema-changes.md)."""

from __future__ import annotations

import sys

from zonesync.cli import common


def _zones(wanted: list[str] | None) -> list[str]:
    """The zones named (every zone when none is); an unknown one exits with one line."""
    known = common.zone_names()
    wanted = wanted or known
    unknown = [z for z in wanted if z not in known]
    if unknown:
        raise SystemExit(common.fail(f"--zone: unknown zone {unknown[0]!r}: one of {', '.join(known)}"))
    return wanted


def cmd_apply(args) -> int:
    from zonesync.schema import steps

    zones = tuple(z for z in (args.zones or "").split(",") if z)
    request = steps.SchemaChangeRequest(args.sql, zones, args.reason or "", args.max_lag_s)
    try:
        table = request.table("zonesync_app")
    except steps.SchemaChangeRefused as exc:
        return common.fail(common.flag_error(exc, {"sql": "--sql"}), "zonesync schema apply")
    if not request.reason.strip():
        return common.fail("--reason: say why (kept in the run's log)", "zonesync schema apply")
    if zones:
        _zones(list(zones))
    conf = {"sql": args.sql, "zones": list(zones), "reason": args.reason, "max_lag_s": args.max_lag_s}
    what = f"{table} in zones {', '.join(zones) or 'all'}"
    run_id, state = common.run_dag("schema_change", conf, what, args.timeout, False, "schema", width=10)
    if run_id is None:
        return common.fail(state, "zonesync schema apply")
    print(f"schema change {run_id}: {state}")
    return 0 if state == "success" else 1


def cmd_diff(args) -> int:
    from zonesync.schema import definitions

    by_zone = {}
    for zone in _zones(args.zone):
        conn = common.zone_conn(zone)
        try:
            by_zone[zone] = definitions.read(conn, args.table)
        finally:
            conn.close()
    lines = definitions.diff(by_zone)
    for line in lines:
        print(line)
    if not lines:
        tables = len({t for tables in by_zone.values() for t in tables})
        print(f"the {tables} table(s) agree in zones {', '.join(by_zone)}")
    return 1 if lines else 0


def cmd_holds(args) -> int:
    from zonesync.apply.batch import table_holds

    found = 0
    for zone in _zones(args.zone):
        conn = common.zone_conn(zone)
        try:
            holds = table_holds.holds(conn)
        finally:
            conn.close()
        for table, (status, detail, since, parked) in holds.items():
            found += 1
            print(f"zone {zone}: {table} {status} since {since:%Y-%m-%d %H:%M:%S}, {parked} event(s) parked: {detail}")
    if not found:
        print("no table is held")
    return 0


def cmd_resume(args) -> int:
    from zonesync.apply.batch import table_holds

    (zone,) = _zones([args.zone])
    conn = common.zone_conn(zone)
    try:
        resumed = table_holds.resume(conn, args.table)
    finally:
        conn.close()
    if not resumed:
        print(f"zonesync schema resume: table {args.table} is not held in zone {zone}: nothing to resume",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"zone {zone}: table {args.table} draining: its appliers apply the parked events in order, then its "
          "events go straight in again (`zonesync schema holds` shows what is left)")  # fmt: skip
    return 0


def cmd_log(args) -> int:
    from zonesync.meta import schema_changes

    changes = schema_changes.recent(common.meta(), args.table, args.limit)
    for change in changes:
        print(f"{change.table or '?'}: {schema_changes.describe(change)} ({change.log_file}:{change.log_pos})")
    if not changes:
        print("no DDL recorded on the replicated schemas")
    return 0


def register(sub) -> None:
    sp = sub.add_parser("schema", help="table definitions across zones, held tables, the DDL the replicators read")
    ssub = sp.add_subparsers(dest="schema_cmd", required=True)
    ap = ssub.add_parser("apply", help="run one DDL statement in every zone (the schema_change DAG), then drain holds")
    ap.add_argument("--sql", required=True, help="one ALTER TABLE, CREATE INDEX or DROP INDEX statement")
    ap.add_argument("--reason", required=True, help="why (kept in the run's log)")
    ap.add_argument("--zones", help="zones in the order to change them, comma-separated (default: every zone)")
    ap.add_argument("--max-lag-s", type=float, default=5.0, help="refuse to start while replication lags more")
    ap.add_argument("--timeout", type=float, default=21600.0, help="stop following after (s)")
    ap.set_defaults(func=cmd_apply)
    d = ssub.add_parser("diff", help="differences between the zones' table definitions (exit 1 when any)")
    d.add_argument("--zone", action="append", help="only this zone (repeatable; default: every zone)")
    d.add_argument("--table", action="append", help="only this table (repeatable)")
    d.set_defaults(func=cmd_diff)
    h = ssub.add_parser("holds", help="tables held by the appliers for definitions that disagree with their events")
    h.add_argument("--zone", action="append", help="only this zone (repeatable)")
    h.set_defaults(func=cmd_holds)
    r = ssub.add_parser("resume", help="drain a held table once the definitions agree (zonesync schema diff)")
    r.add_argument("--zone", required=True, help="the zone whose appliers hold it")
    r.add_argument("--table", required=True, help="the held table")
    r.set_defaults(func=cmd_resume)
    lg = ssub.add_parser("log", help="the DDL the replicators read on the replicated schemas, newest first")
    lg.add_argument("--table", help="only this table")
    lg.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    lg.set_defaults(func=cmd_log)
