"""`zonesync meta | rules | guards`: the meta store from the command line."""

from __future__ import annotations

import json
import sys

import yaml


def _meta():
    from zonesync.meta.db import MetaConfig

    return MetaConfig.from_env()


def cmd_meta_migrate(args) -> int:
    from zonesync import config
    from zonesync.meta import db
    from zonesync.meta.store import MetaStore

    meta = _meta()
    applied = db.migrate(meta)
    print(f"meta store {meta.describe()}: " + (f"applied migrations {applied}" if applied else "schema is current"))
    if args.zones:
        names = config.parse_zone_names(args.zones, "--zones")
        MetaStore(meta).ensure_zones(list(enumerate(names, start=1)))
        print(f"zones: {', '.join(f'{i}={n}' for i, n in enumerate(names, start=1))}")
    return 0


def cmd_rules_check(args) -> int:
    from zonesync.meta.db import MetaError
    from zonesync.meta.store import MetaStore
    from zonesync.rules import check, load_file

    rules = load_file(args.file)
    known = None
    if not args.offline:
        try:
            known = set(MetaStore(_meta()).zones())
        except MetaError as exc:
            print(f"zonesync: {exc} (use --offline to check without the meta store's zone list)", file=sys.stderr)
            return 2
    check(rules, known, require_writable=not args.allow_blocked)
    zsids = rules.zsid_max - rules.zsid_min + 1
    print(f"{args.file}: OK: {zsids} ZSIDs, each writable in exactly one zone ({', '.join(sorted(rules.zones()))})")
    return 0


def cmd_rules_apply(args) -> int:
    from zonesync.meta import guards
    from zonesync.rules import load_file

    rules = load_file(args.file)
    meta = _meta()
    from zonesync.meta.store import MetaStore
    from zonesync.rules import check

    check(rules, set(MetaStore(meta).zones()), require_writable=not args.allow_blocked)  # its errors first
    moves = _owner_moves(meta, rules)
    if moves and not args.move_owners:
        print(
            f"zonesync: rules apply: {'; '.join(moves)}: writable ZSIDs would move straight to another owner, "
            "and the old owner's last changes could reach other zones after the new owner's and lock rows there "
            "(seed S000-48): move them with the zone switch, or pass --move-owners if the old owner has not "
            "written them",
            file=sys.stderr,
        )
        return 2
    if args.no_wait:
        from zonesync.meta.store import MetaStore

        version = MetaStore(meta).publish_rules(rules, args.reason, require_writable=not args.allow_blocked)
        print(f"published rules version {version} (not waiting for acks)")
        return 0
    version = guards.push_and_wait(
        meta, rules, args.reason, timeout=args.timeout, require_writable=not args.allow_blocked
    )
    acked = guards.list_instances(meta, rules.zones())
    print(
        f"published rules version {version}; acked by {len(acked)} guard instance(s) in zones "
        f"{', '.join(sorted(rules.zones()))}"
    )
    return 0


def _owner_moves(meta, rules) -> list[str]:
    """ZSID ranges ACTIVE in one zone now and ACTIVE in another zone in `rules`."""
    from zonesync.meta.store import MetaStore, diff

    current = MetaStore(meta).rules_at()
    if current is None:
        return []
    moves = []
    for line in diff(current[1], rules):
        what, _, change = line.partition(": ")
        before, _, after = change.partition(" -> ")
        if before.endswith(" ACTIVE") and after.endswith(" ACTIVE") and before != after:
            moves.append(line)
    return moves


def cmd_rules_show(args) -> int:
    from zonesync.meta.store import MetaStore

    store = MetaStore(_meta())
    if args.version is None:
        found = store.rules_at()
        if found is None:
            print("no rules published yet: `zonesync rules apply FILE --reason ...`")
            return 1
        version, rules = found
    else:
        version, rules = args.version, store.rules_version(args.version)
    if args.history:
        for v in store.history():
            print(f"v{v.version:<5} {v.kind:<9} {v.created_at}  {v.author}: {v.reason}")
        return 0
    print(f"# rules version {version}")
    if args.json:
        print(json.dumps(rules.to_doc(), indent=2))
    else:
        print(yaml.safe_dump(rules.to_doc(), sort_keys=False), end="")
    return 0


def cmd_rules_diff(args) -> int:
    from zonesync.meta.store import MetaStore, diff

    store = MetaStore(_meta())
    lines = diff(store.rules_version(args.a), store.rules_version(args.b))
    print("\n".join(lines) if lines else f"versions {args.a} and {args.b} have the same rules")
    return 0


def cmd_guards(args) -> int:
    from zonesync.meta import guards

    meta = _meta()
    if args.action == "forget":
        if not args.instance:
            print("zonesync: guards forget needs an instance id (see `zonesync guards`)", file=sys.stderr)
            return 2
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
    meta = sub.add_parser("meta", help="the meta store: schema migrations, zones")
    meta_sub = meta.add_subparsers(dest="meta_command", required=True, metavar="ACTION")
    mig = meta_sub.add_parser("migrate", help="create or upgrade the meta store schema (idempotent)")
    mig.add_argument("--zones", help="comma-separated zone names to register, ids 1..N (e.g. a,b,c)")
    mig.set_defaults(func=cmd_meta_migrate)

    rules = sub.add_parser("rules", help="zone-sharding rules: check, apply, show, diff")
    rsub = rules.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    chk = rsub.add_parser("check", help="validate a rule file and run the rule check")
    chk.add_argument("file")
    chk.add_argument("--offline", action="store_true", help="do not read the zone list from the meta store")
    chk.add_argument("--allow-blocked", action="store_true", help="accept BLOCK/RESHARDING ranges (staged changes)")
    chk.set_defaults(func=cmd_rules_check)
    app = rsub.add_parser("apply", help="check, publish as a new version, wait for the guards' acks")
    app.add_argument("file")
    app.add_argument("--reason", required=True, help="why: recorded in the version and the audit log")
    app.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for acks (default 10)")
    app.add_argument("--no-wait", action="store_true", help="publish without waiting for acks")
    app.add_argument("--allow-blocked", action="store_true", help="accept BLOCK/RESHARDING ranges (staged changes)")
    app.add_argument(
        "--move-owners",
        action="store_true",
        help="allow moving writable ZSIDs straight to another owner (without a zone switch)",
    )
    app.set_defaults(func=cmd_rules_apply)
    show = rsub.add_parser("show", help="print the current (or a given) rules version")
    show.add_argument("--version", type=int)
    show.add_argument("--json", action="store_true")
    show.add_argument("--history", action="store_true", help="list recent versions instead")
    show.set_defaults(func=cmd_rules_show)
    dif = rsub.add_parser("diff", help="what changed between two rules versions")
    dif.add_argument("a", type=int)
    dif.add_argument("b", type=int)
    dif.set_defaults(func=cmd_rules_diff)

    g = sub.add_parser("guards", help="guard instances: versions and health; `guards forget ID`")
    g.add_argument("action", nargs="?", choices=["list", "forget"], default="list")
    g.add_argument("instance", nargs="?")
    g.set_defaults(func=cmd_guards)
