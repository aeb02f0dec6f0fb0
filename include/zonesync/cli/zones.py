"""`zonesync zones | zones add NAME`: the mesh's members.

Adding a zone fences its appliers until its full copy (zonesync.copy.new_zone) and
registers it; the command prints what to do next. The zone's database comes from
ZONESYNC_ZONE_<NAME>_URL (or, in the dev environment, its settings).
"""

from __future__ import annotations

from zonesync.cli import common


def cmd_zones(args) -> int:
    from zonesync.meta.store import MetaStore

    if args.command and args.command[0] == "add":
        return _add(args)
    if args.command:
        unknown = " ".join(args.command)
        return common.fail(f"unknown arguments {unknown!r}: use `zonesync zones add NAME`", "zonesync zones")
    for name, zone_id in sorted(MetaStore(common.meta()).zones().items(), key=lambda kv: kv[1]):
        print(f"{zone_id:>3}  {name}")
    return 0


def _add(args) -> int:
    from zonesync.copy.new_zone import add_zone
    from zonesync.copy.request import CopyRefused
    from zonesync.runtime import transport

    if len(args.command) != 2:
        return common.fail("zones add: name the zone, e.g. `zonesync zones add d`", "zonesync zones")
    name = args.command[1]
    try:
        zone_id = add_zone(common.meta(), name, lambda: common.zone_conn(name), transport.partitions(), args.id)
    except CopyRefused as exc:
        field, _, why = str(exc).partition(": ")
        return common.fail(f"zones add: {'NAME' if field == 'name' else '--' + field}: {why}", "zonesync zones")
    print(f"zone {name} added with id {zone_id}; its appliers wait for its full copy. Next:")
    print(f"  1. start its replicator and appliers, and restart the others' appliers with {name} among the zones")
    print(f"  2. zonesync copy --from <a healthy zone> --to {name} --mode add-zone --reason 'add zone {name}'")
    return 0


def register(sub) -> None:
    zs = sub.add_parser("zones", help="the mesh's zones; `zones add NAME` adds one, fenced until its full copy")
    zs.add_argument("command", nargs="*", help="empty to list, or: add NAME")
    zs.add_argument("--id", type=int, help="the new zone's id (default: the next free one, up to 16)")
    zs.set_defaults(func=cmd_zones)
