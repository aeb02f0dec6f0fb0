"""`zonesync guards [list | forget ID]`: the guard instances that enforce the rules."""

from __future__ import annotations

from zonesync.cli import common


def cmd_guards(args) -> int:
    from zonesync.meta import guards

    meta = common.meta()
    if args.action == "forget":
        if not args.instance:
            return common.fail("guards forget needs an instance id (see `zonesync guards`)")
        from zonesync.meta.store import default_actor

        gone = guards.forget(meta, args.instance, default_actor())
        print(f"{args.instance}: {'forgotten' if gone else 'not registered'}")
        return 0 if gone else 1
    instances = guards.list_instances(meta)
    if not instances:
        print("no guard instances registered")
        return 0
    print(f"{'instance':<44} {'zone':<6} {'pid':>7} {'version':>8} {'heartbeat':>10}  health")
    for g in instances:
        print(
            f"{g.instance_id:<44} {g.zone:<6} {g.pid:>7} {g.version_applied:>8} "
            f"{g.heartbeat_age_ms / 1000:>8.1f} s  {'healthy' if g.healthy else 'UNHEALTHY'}"
        )
    return 0 if all(g.healthy for g in instances) else 1


def register(sub) -> None:
    g = sub.add_parser("guards", help="guard instances: versions and health; `guards forget ID`")
    g.add_argument("action", nargs="?", choices=["list", "forget"], default="list")
    g.add_argument("instance", nargs="?")
    g.set_defaults(func=cmd_guards)
