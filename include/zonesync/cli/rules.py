"""`zonesync rules check | apply | show | diff`: zone-sharding rules in the meta store."""

from __future__ import annotations

import json

import yaml

from zonesync.cli import common


def cmd_rules_check(args) -> int:
    from zonesync.meta.db import MetaError
    from zonesync.meta.store import MetaStore
    from zonesync.rules import check, load_file

    rules = load_file(args.file)
    known = None
    if not args.offline:
        try:
            known = set(MetaStore(common.meta()).zones())
        except MetaError as exc:
            return common.fail(f"{exc} (use --offline to check without the meta store's zone list)")
    check(rules, known, require_writable=not args.allow_blocked)
    zsids = rules.zsid_max - rules.zsid_min + 1
    print(f"{args.file}: OK: {zsids} ZSIDs, each writable in exactly one zone ({', '.join(sorted(rules.zones()))})")
    return 0


def cmd_rules_apply(args) -> int:
    from zonesync.meta import guards
    from zonesync.meta.store import MetaStore
    from zonesync.rules import check, load_file

    rules = load_file(args.file)
    meta = common.meta()
    check(rules, set(MetaStore(meta).zones()), require_writable=not args.allow_blocked)  # its errors first
    moves = _owner_moves(meta, rules)
    made_resident = _made_resident(meta, rules)
    if moves and not args.move_owners:
        return common.fail(
            f"rules apply: {'; '.join(moves)}: writable ZSIDs would move straight to another owner, "
            "and the old owner's last changes could reach other zones after the new owner's and lock rows there "
            "(seed S000-48): move them with the zone switch, or pass --move-owners if the old owner has not "
            "written them"
        )
    if args.no_wait:
        version = MetaStore(meta).publish_rules(rules, args.reason, require_writable=not args.allow_blocked)
        print(f"published rules version {version} (not waiting for acks)")
        _hint_purge(made_resident)
        return 0
    try:
        version = guards.push_and_wait(
            meta, rules, args.reason, timeout=args.timeout, require_writable=not args.allow_blocked
        )
    except guards.AckTimeout as exc:  # published: say that it is live, and who has not taken it yet
        return common.fail(
            f"rules apply: version {exc.version} is published and in force for every guard that acked it; not "
            f"acked within {args.timeout:g} s by: {exc.lagging} (they take it when they next poll; `zonesync guards` "
            "lists them)"
        )
    acked = guards.list_instances(meta, rules.zones())
    print(
        f"published rules version {version}; acked by {len(acked)} guard instance(s) in zones "
        f"{', '.join(sorted(rules.zones()))}"
    )
    _hint_purge(made_resident)
    return 0


def _made_resident(meta, rules) -> list[str]:
    """The tables `rules` makes resident that the newest rules replicate (every zone holds
    all their rows until they are purged)."""
    from zonesync.meta.store import MetaStore

    current = MetaStore(meta).rules_at()
    if current is None:
        return []
    before = current[1].tables
    return sorted(n for n in rules.resident_tables() if n in before and not before[n].resident)


def _hint_purge(tables: list[str]) -> None:
    for name in tables:
        print(f"{name} is resident now, but every zone still holds the other units' rows it replicated: "
              f"`zonesync resident purge --table {name} --dry-run`, then with --reason '...'")  # fmt: skip


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

    store = MetaStore(common.meta())
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

    store = MetaStore(common.meta())
    lines = diff(store.rules_version(args.a), store.rules_version(args.b))
    print("\n".join(lines) if lines else f"versions {args.a} and {args.b} have the same rules")
    return 0


def register(sub) -> None:
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
