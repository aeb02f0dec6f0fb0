"""`zonesync resident purge`: a table declared resident after it was replicated, made
resident in fact (migrate/resident_purge.py; docs/migration.md, "Resident tables")."""

from __future__ import annotations

from zonesync.cli import common

PREFIX = "zonesync resident purge"


def cmd_resident_purge(args) -> int:
    from zonesync.migrate.resident_purge import PurgeRefused, run

    zones = [z for value in args.zone or () for z in value.split(",") if z]
    try:
        return run(common.meta(), args.table, zones, args.reason, args.dry_run, common.zone_conn, batch=args.batch)
    except PurgeRefused as exc:
        return common.fail(str(exc), PREFIX)


def register(sub) -> None:
    res = sub.add_parser("resident", help="resident tables: purge the other units' rows a zone still holds")
    rsub = res.add_subparsers(dest="resident_command", required=True, metavar="ACTION")
    pur = rsub.add_parser(
        "purge",
        help="delete, in each zone, a resident table's rows of entities registered in another unit (not "
        "replicated, no tombstones); run after publishing rules that make a replicated table resident",
    )
    pur.add_argument("--table", help="the resident table (as the newest rules declare it)")
    pur.add_argument("--zone", action="append", help="zones to purge (repeat, or a,b); default: every zone")
    pur.add_argument("--dry-run", action="store_true", help="print per zone what would go, by owner zone")
    pur.add_argument("--reason", help="why (kept in the audit log); required unless --dry-run")
    pur.add_argument("--batch", type=int, default=5000, help="rows per key-range chunk (each its own transaction)")
    pur.set_defaults(func=cmd_resident_purge)
