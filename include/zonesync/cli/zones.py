"""`zonesync zones | zones add NAME | zones set-primary NAME HOST:PORT | zones primaries NAME`.

Adding a zone fences its appliers until its full copy (zonesync.copy.new_zone) and
registers it; the command prints what to do next. The zone's database comes from
ZONESYNC_ZONE_<NAME>_URL (or, in the dev environment, its settings).

`set-primary` maps a zone's capture onto its promoted replica (capture/failover.py,
docs/failover.md): the account is the URL's, the address the one given; the zone's
replicator and appliers follow at their next pass. `primaries` lists the servers capture
has read, in order (capture/segments.py).
"""

from __future__ import annotations

from zonesync.cli import common


def cmd_zones(args) -> int:
    from zonesync.meta.store import MetaStore

    if args.command and args.command[0] == "add":
        return _add(args)
    if args.command and args.command[0] == "set-primary":
        return _set_primary(args)
    if args.command and args.command[0] == "primaries":
        return _primaries(args)
    if args.command:
        unknown = " ".join(args.command)
        usage = "`zonesync zones add NAME`, `zones set-primary NAME HOST:PORT` or `zones primaries NAME`"
        return common.fail(f"unknown arguments {unknown!r}: use {usage}", "zonesync zones")
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


def _set_primary(args) -> int:
    from zonesync.capture.failover import FailoverRefused, promote
    from zonesync.capture.source import SourceDB, SourceSettings
    from zonesync.runtime import transport

    prefix = "zonesync zones set-primary"
    if len(args.command) != 3:
        return common.fail("name the zone and its new primary, e.g. `zonesync zones set-primary a 10.0.0.7:3306`",
                           prefix)  # fmt: skip
    zone, where = args.command[1], common.host_port(args.command[2])
    if zone not in common.zone_names():
        return common.fail(f"ZONE: {zone!r} is not a zone of ZONESYNC_ZONES ({', '.join(common.zone_names())})",
                           prefix)  # fmt: skip
    if where is None:
        return common.fail(f"HOST:PORT: {args.command[2]!r} is not host:port, e.g. 10.0.0.7:3306", prefix)
    ep = common.zone_endpoint(zone)
    new = SourceDB(where[0], where[1], ep.user, ep.password, [ep.database])
    try:
        done = promote(common.meta(), zone, new, by=f"zonesync zones set-primary ({args.reason or 'no reason'})",
                       bootstrap=transport.bootstrap(), topic=transport.topic(zone),
                       partitions=transport.partitions(), allow_lost=args.allow_lost)  # fmt: skip
    except (FailoverRefused, SourceSettings) as exc:
        return common.fail(str(exc), prefix)
    except Exception as exc:  # noqa: BLE001 - the new server unreachable, meta down: one line
        return common.fail(f"{where[0]}:{where[1]}: {exc}", prefix)
    seg = done.segment
    if done.already:
        print(f"zone {zone}'s primary is already {seg.address} (segment {seg.segment}): nothing to do")
        return 0
    print(f"zone {zone}'s primary is now {seg.address} (server_id {seg.server_id}, segment {seg.segment})")
    print(f"  capture resumes at {done.reread_from[0]}:{done.reread_from[1]} (GTID {seg.gtid_pos or '-'}), "
          f"continuing {done.tail_events} event(s) published after the old checkpoint")  # fmt: skip
    if done.lost:
        print(f"  LOST: the old primary's transactions {done.lost} are not on the new one: check the zone "
              f"(zonesync check --zones {zone},...)")  # fmt: skip
    print(f"  point ZONESYNC_ZONE_{zone.upper()}_URL (and the Airflow connections) at {seg.address}; the "
          "replicator and appliers follow now")  # fmt: skip
    return 0


def _primaries(args) -> int:
    from zonesync.capture import segments

    if len(args.command) != 2:
        return common.fail("name the zone, e.g. `zonesync zones primaries a`", "zonesync zones primaries")
    rows = segments.history(common.meta(), args.command[1])
    if not rows:
        print(f"zone {args.command[1]}: capture has not run yet")
    for seg in rows:
        print(
            f"{seg.segment:>3}  {seg.address:<24} server_id {seg.server_id:<6} from {seg.first_file}:"
            f"{seg.first_pos}  LSN file {seg.lsn_file_offset:+d}{'  LOST ' + seg.lost_gtids if seg.lost_gtids else ''}"
        )
    return 0


def register(sub) -> None:
    zs = sub.add_parser("zones", help="the mesh's zones; `zones add NAME` adds one, fenced until its full copy")
    zs.add_argument(
        "command", nargs="*", help="empty to list, or: add NAME | set-primary NAME HOST:PORT | primaries NAME"
    )
    zs.add_argument("--id", type=int, help="the new zone's id (default: the next free one, up to 16)")
    zs.add_argument("--reason", help="set-primary: why (kept with the promotion)")
    zs.add_argument(
        "--allow-lost",
        action="store_true",
        help="set-primary: promote even though the new primary lacks transactions capture read on the old one",
    )
    zs.set_defaults(func=cmd_zones)
