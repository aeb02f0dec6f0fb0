"""`zonesync meta migrate`: the meta store's schema and zones."""

from __future__ import annotations

from zonesync.cli import common


def cmd_meta_migrate(args) -> int:
    from zonesync import config
    from zonesync.meta import db
    from zonesync.meta.store import MetaStore

    names = config.parse_zone_names(args.zones, "--zones") if args.zones else []  # checked before anything changes
    meta = common.meta()
    applied = db.migrate(meta)
    print(f"meta store {meta.describe()}: " + (f"applied migrations {applied}" if applied else "schema is current"))
    if names:
        MetaStore(meta).ensure_zones(list(enumerate(names, start=1)))
        print(f"zones: {', '.join(f'{i}={n}' for i, n in enumerate(names, start=1))}")
    return 0


def register(sub) -> None:
    meta = sub.add_parser("meta", help="the meta store: schema migrations, zones")
    meta_sub = meta.add_subparsers(dest="meta_command", required=True, metavar="ACTION")
    mig = meta_sub.add_parser("migrate", help="create or upgrade the meta store schema (idempotent)")
    mig.add_argument("--zones", help="comma-separated zone names to register, ids 1..N (e.g. a,b,c)")
    mig.set_defaults(func=cmd_meta_migrate)
