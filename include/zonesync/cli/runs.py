"""`zonesync runs`: switches, copies, checks, migrations, tag backfills and schema changes
as one list, newest first, with the progress and ETA of the running ones (console.runs:
what the console page shows).
`zonesync health`: each zone and what keeps it from healthy (console.mesh)."""

from __future__ import annotations

import json

from zonesync.cli import common


def cmd_runs(args) -> int:
    from zonesync.console import runs

    try:
        page = runs.recent(common.meta(), args.kind, args.limit, args.before, zone_conn=common.zone_conn)
    except runs.BadQuery as exc:
        return common.fail(f"--{exc}", "zonesync runs")
    if args.json:
        print(json.dumps(page, indent=2, default=str))
        return 0
    if not page["runs"]:
        print("no runs yet" if not args.before else "no runs before that")
        return 0
    for run in page["runs"]:
        print(runs.text(run))
    if page["next_before"]:
        print(f"older: zonesync runs --before {page['next_before']}")
    return 0


def cmd_health(args) -> int:
    from zonesync.console import mesh

    zones = mesh.zones(common.meta())
    if args.json:
        print(json.dumps(zones, indent=2, default=str))
    for z in [] if args.json else zones:
        g = z["guards"]
        print(f"{z['zone']:<8} {z['health']:<9} guards {g['healthy']}/{g['total']} healthy, "
              f"replicator {z['replicator']['holder'] or '-'}, {z['open_alerts']} open alerts")  # fmt: skip
        for problem in z["problems"]:
            print(f"    {problem}")
    return 0 if all(z["health"] == "healthy" for z in zones) else 1


def register(sub) -> None:
    r = sub.add_parser("runs", help="switches, copies, checks, migrations, backfills and schema changes, newest "
                                           "first, with progress and ETA")  # fmt: skip
    r.add_argument("--kind", choices=["switch", "copy", "check", "migration", "backfill", "schema"],
                   help="only this kind")  # fmt: skip
    r.add_argument("--limit", type=int, default=20, help="runs per page (1..500)")
    r.add_argument("--before", help="the page after this one (the `older:` line of the page before), or a start time")
    r.add_argument("--json", action="store_true", help="print the page as the HTTP API returns it")
    r.set_defaults(func=cmd_runs)
    h = sub.add_parser("health", help="each zone's guards, replicator, appliers and alerts; exit 1 if one is degraded")
    h.add_argument("--json", action="store_true", help="print it as the HTTP API returns it")
    h.set_defaults(func=cmd_health)
