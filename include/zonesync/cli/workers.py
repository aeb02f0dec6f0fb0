"""`zonesync replicate | apply | tag | tag-kv`: a zone's long-running workers, in the foreground."""

from __future__ import annotations


def cmd_replicate(args) -> int:
    from zonesync.runtime import workers

    return workers.run_forever(workers.build_replicator(args.zone, args.server_id))


def cmd_apply(args) -> int:
    from zonesync.runtime import workers

    try:
        weights = workers.parse_table_weights(args.table_weights) if args.table_weights else None
    except ValueError as exc:
        raise SystemExit(f"zonesync apply: {exc}") from None
    atomic = True if args.atomic_transactions else None  # (else $ZONESYNC_APPLY_ATOMIC_TRANSACTIONS)
    applier = workers.build_applier(
        args.zone, args.workers, table_weights=weights, group=args.group, atomic_transactions=atomic
    )
    return workers.run_forever(applier)


def cmd_tag(args) -> int:
    from zonesync.runtime import workers

    return workers.run_forever(workers.build_tagger(args.zone))


def cmd_tag_kv(args) -> int:
    from zonesync.runtime import workers

    return workers.run_forever(workers.build_kv_tagger(args.zone))


def register(sub) -> None:
    rep = sub.add_parser("replicate", help="run the replicator of a zone (binlog -> Kafka) in the foreground")
    rep.add_argument("--zone", required=True)
    rep.add_argument("--server-id", type=int, help="binlog reader server_id (default 4000 + zone id)")
    rep.set_defaults(func=cmd_replicate)
    tag = sub.add_parser("tag", help="run the tagger of a zone (every zone's changes -> its tag store)")
    tag.add_argument("--zone", required=True)
    tag.set_defaults(func=cmd_tag)
    tkv = sub.add_parser("tag-kv", help="run the KV tagger of a zone (its KV repos' change logs -> its tag store)")
    tkv.add_argument("--zone", required=True)
    tkv.set_defaults(func=cmd_tag_kv)
    app = sub.add_parser("apply", help="run the applier of a zone (Kafka -> zone) in the foreground")
    app.add_argument("--zone", required=True)
    app.add_argument("--workers", type=int, default=4, help="parallel apply connections")
    app.add_argument(
        "--group",
        action="store_true",
        help="share the zone's partitions with the other appliers started with --group (a consumer group): "
        "run one per host; a crashed one's partitions move to the others",
    )
    app.add_argument(
        "--table-weights",
        metavar="T=W,...",
        help="apply order of tables within a round, lightest first, e.g. tenants=1,orders=2 "
        "(default: $ZONESYNC_APPLY_TABLE_WEIGHTS; unlisted tables weigh 0)",
    )
    app.add_argument(
        "--atomic-transactions",
        action="store_true",
        help="a source transaction's rows become visible together, across partitions (rounds with such "
        "transactions run on one connection; default: $ZONESYNC_APPLY_ATOMIC_TRANSACTIONS)",
    )
    app.set_defaults(func=cmd_apply)
