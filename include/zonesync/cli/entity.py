"""`zonesync entity where | show | list | rows | register`: the entity registry (docs/entities.md)
and an entity's rows and KV keys in a zone's tag store (docs/tagging.md, docs/kv.md)."""

from __future__ import annotations

from zonesync.cli import common


def _le_arg(text: str) -> tuple[str, str]:
    le_type, sep, le_id = text.partition(":")
    if not sep or not le_type or not le_id:
        raise SystemExit(f"zonesync: --le {text!r}: write TYPE:ID, e.g. --le chat:9001")
    return le_type, le_id


def cmd_entity_where(args) -> int:
    from zonesync.routing import Unknown, where

    try:
        loc = where(common.meta(), args.type, args.id)
    except Unknown as exc:
        print(f"unknown: {exc}")
        return 1
    flag = ", writes stopped" if loc.stop_write else ""
    print(f"{args.type} {args.id}: zone {loc.zone} ({loc.status}{flag}; {loc.how}; meta version {loc.version})")
    return 0


def cmd_entity_show(args) -> int:
    from zonesync.meta.entities import EntityRegistry

    registry = EntityRegistry(common.meta())
    found = registry.biz(args.type, args.id)
    if found is None:
        reg = registry.locate(args.type, args.id)
        if reg is None:
            print(f"unknown: {args.type} {args.id} is neither a registered biz entity nor a locating entity")
            return 1
        if reg.be_type is None:
            print(f"locating entity {args.type} {args.id}: zone {reg.zone}, {reg.status}, version {reg.version}")
            return 0
        found = registry.biz(reg.be_type, reg.be_id)
    biz, les = found
    from zonesync.migrate.store import MigrationStore

    # an LE's lock while it moves (the seed's Syncing state) is its running migration's row
    running = MigrationStore(common.meta()).running(biz.be_type, biz.be_id)
    moving = {tuple(le): run for run in running for le in run.les}
    print(f"biz entity {biz.be_type} {biz.be_id}: zone {biz.zone}, {biz.status}, version {biz.version}")
    for le in les:
        stop = " (writes stopped)" if le.stop_write else ""
        run = moving.get((le.le_type, le.le_id))
        how = f"; migrating to {run.target_zone} ({run.run_id}, {run.phase})" if run is not None else ""
        print(f"  {le.le_type} {le.le_id}: zone {le.zone}, {le.status}{stop}, version {le.version}{how}")
    return 0


def cmd_entity_list(args) -> int:
    from zonesync.meta.entities import EntityRegistry

    rows = EntityRegistry(common.meta()).listed(args.type, args.zone, args.limit)
    for r in rows:
        biz = f"  (of {r.be_type} {r.be_id})" if r.be_type else ""
        print(f"{r.le_type:<12} {r.le_id:<24} zone {r.zone:<4} {r.status:<10} v{r.version}{biz}")
    print(f"{len(rows)} locating entit{'y' if len(rows) == 1 else 'ies'}" + (" (limit reached)" if len(rows) ==
          args.limit else ""))  # fmt: skip
    return 0


def cmd_entity_rows(args) -> int:
    """Every row of the entity in zone ZONE: its tagged rows (the zone's tag store) and the
    rows of forward-rule tables (fetched from their parents' keys), and its KV keys (the KV
    repos' tags): per-table and per-repo counts, then keys."""
    from zonesync.meta.store import MetaStore
    from zonesync.runtime.endpoints import zone_endpoint
    from zonesync.tagging.locate import locate
    from zonesync.tagging.rules import TagRules
    from zonesync.tagging.tag_store import TagStore

    found = MetaStore(common.meta()).tags_at()
    rules = found[1] if found else TagRules()
    ep = zone_endpoint(args.zone)
    conn = ep.connect()
    try:
        rows = locate(conn, TagStore(ep.connect, ep.database), rules, args.type, args.id)
    finally:
        conn.close()
    keys = _kv_keys(args.zone, ep.connect, rules, args.type, args.id)
    total = sum(len(v) for v in rows.values())
    forward = {r.table for r in rules.mysql if r.forward_table}
    print(f"{args.type} {args.id} in zone {args.zone}: {total} row(s)"
          + (f" ({', '.join(f'{t} {len(v)}' + (' by forward rule' if t in forward else '') for t, v in rows.items())})"
             if rows else ""))  # fmt: skip
    if rules.kv_repos:
        n_keys = sum(len(v) for v in keys.values())
        print(f"{args.type} {args.id} in zone {args.zone}: {n_keys} KV key(s)"
              + (f" ({', '.join(f'{repo} {len(v)}' for repo, v in keys.items())})" if keys else ""))  # fmt: skip
    if args.keys:
        shown = 0
        for table, idx in rows.items():
            for key in idx[: max(0, args.limit - shown)]:
                print(f"  {table} {key}")
            shown += len(idx)
        for repo, listed in keys.items():
            for key, there in listed[: max(0, args.limit - shown)]:
                print(f"  kv {repo} {key}" + ("" if there else "  (gone: expired or removed around the guard)"))
            shown += len(listed)
    return 0


def _kv_keys(zone: str, connect, rules, entity_type: str, entity_id: str) -> dict:
    """The entity's KV keys in `zone` ({} when the tag rules have no KV repo)."""
    if not rules.kv_repos:
        return {}
    from zonesync.runtime.kv_endpoint import kv_endpoint
    from zonesync.tagging.locate import locate_keys

    return locate_keys(connect, kv_endpoint(zone), rules, entity_type, entity_id)


def cmd_entity_register(args) -> int:
    from zonesync.meta.entities import EntityRegistry

    les = [_le_arg(t) for t in args.le] or [(args.type, args.id)]
    version = EntityRegistry(common.meta()).register_biz(args.type, args.id, args.zone, les, args.reason, args.status,
                                                         new=args.new)  # fmt: skip
    print(f"registered {args.type} {args.id} in zone {args.zone} with {len(les)} locating entit"
          f"{'y' if len(les) == 1 else 'ies'} (meta version {version})")  # fmt: skip
    return 0


def register(sub) -> None:
    from zonesync.meta.entities import STATUSES

    ent = sub.add_parser("entity", help="the entity registry: where an entity lives, its locating entities")
    esub = ent.add_subparsers(dest="entity_command", required=True, metavar="ACTION")
    wh = esub.add_parser("where", help="the zone of a locating entity (registered, or by the ZSID rules)")
    wh.add_argument("type")
    wh.add_argument("id")
    wh.set_defaults(func=cmd_entity_where)
    show = esub.add_parser("show", help="a biz entity (or a locating entity's) with its locating entities")
    show.add_argument("type")
    show.add_argument("id")
    show.set_defaults(func=cmd_entity_show)
    lst = esub.add_parser("list", help="registered locating entities")
    lst.add_argument("--type")
    lst.add_argument("--zone")
    lst.add_argument("--limit", type=int, default=1000)
    lst.set_defaults(func=cmd_entity_list)
    rows = esub.add_parser("rows", help="every row and KV key of an entity in a zone (counts; --keys lists them)")
    rows.add_argument("type")
    rows.add_argument("id")
    rows.add_argument("--zone", required=True)
    rows.add_argument("--keys", action="store_true", help="list each row's unique-key values too")
    rows.add_argument("--limit", type=int, default=100_000, help="keys listed at most (with --keys)")
    rows.set_defaults(func=cmd_entity_rows)
    reg = esub.add_parser("register", help="register a biz entity and its locating entities in a zone")
    reg.add_argument("type", help="the biz entity's type, e.g. tenant")
    reg.add_argument("id")
    reg.add_argument("--zone", required=True)
    reg.add_argument("--le", action="append", default=[], metavar="TYPE:ID",
                     help="a locating entity it owns (repeatable; default: the biz entity itself)")  # fmt: skip
    reg.add_argument("--status", default="ACTIVE", choices=STATUSES)
    reg.add_argument("--reason", required=True, help="why: recorded in the version and the audit log")
    reg.add_argument("--new", action="store_true",
                     help="they have no rows yet: register them outside their ZSID owner's zone")  # fmt: skip
    reg.set_defaults(func=cmd_entity_register)
