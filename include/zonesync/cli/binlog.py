"""`zonesync binlog safe-purge | bootstrap | skip-lost`: a zone's binlog retention and where
its capture starts (or goes on after a lost file)."""

from __future__ import annotations

from zonesync.cli import common


def cmd_bootstrap(args) -> int:
    """Set where a zone's capture starts (seed S001-09): for a zone never captured, or one
    whose checkpoint history was lost (the replicator refuses to guess)."""
    from zonesync.capture.binlog import binlog_end
    from zonesync.capture.start import bootstrap
    from zonesync.meta.store import default_actor

    conn = common.zone_conn(args.zone)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            sizes = {row[0]: int(row[1]) for row in cur.fetchall()}
        end = binlog_end(conn)
    finally:
        conn.close()
    if args.at == "current":
        log_file, log_pos = end
    else:
        log_file, sep, pos = args.at.rpartition(":")
        if not sep or not log_file or not pos.isdigit():
            print("--at: give FILE:POS (e.g. binlog.000012:4, as SHOW BINARY LOGS names files) or current")
            return 2
        log_pos = int(pos)
        if log_file not in sizes or not 4 <= log_pos <= sizes[log_file]:
            held = f"{min(sizes)} to {max(sizes)}" if sizes else "none"
            print(f"--at: {args.at} is not a position in zone {args.zone}'s binlog (files held: {held})")
            return 2
    bootstrap(common.meta(), args.zone, log_file, log_pos, f"zonesync binlog bootstrap by {default_actor()}")
    print(f"zone {args.zone}: capture starts at {log_file}:{log_pos}; its consumers see a new chain")
    return 0


def cmd_skip_lost(args) -> int:
    """The zone's checkpoint file is gone: capture goes on from the binlog's end (S000-53);
    the other zones then need a repair copy from it."""
    from zonesync.capture.start import SkipRefused, skip_lost
    from zonesync.meta.store import default_actor

    if not args.reason.strip():
        return common.fail("--reason is empty: say why the lost changes are given up", "zonesync binlog skip-lost")
    meta = common.meta()
    conn = common.zone_conn(args.zone)
    try:
        before, after = skip_lost(meta, args.zone, conn, args.reason, default_actor())
    except SkipRefused as exc:
        print(f"refused: {exc}")
        return 1
    finally:
        conn.close()
    rows, _ = meta.run("SELECT name FROM zones WHERE name <> %s ORDER BY name", (args.zone,))
    print(f"zone {args.zone}: capture goes on from {after.log_file}:{after.log_pos} (its checkpoint at LSN "
          f"{before.lsn} was in {before.log_file}, which is gone); what it wrote in between reached no zone. "
          "Repair each:")  # fmt: skip
    for (other,) in rows:
        print(f"  zonesync copy --from {args.zone} --to {other} --mode repair --reason 'binlog of {args.zone} lost'")
    return 0


def cmd_safe_purge(args) -> int:
    from zonesync.capture.purge import safe_purge
    from zonesync.events import EventError

    if args.replica is not None:
        return _purge_replica(args)
    if args.before is not None or args.older_than is not None:
        return _purge_older(args)
    try:
        purged_to, reason = safe_purge(
            common.meta(), args.zone, dry_run=args.dry_run, to_file=args.to, source=common.primary_endpoint(args.zone)
        )
    except EventError as exc:  # --to is not a binlog file name
        print(f"--to: {exc}: give a file name as `SHOW BINARY LOGS` lists it, e.g. binlog.000012")
        return 2
    print(
        reason
        if purged_to is None
        else f"{'would purge' if args.dry_run else 'purged'} binlogs before {purged_to} ({reason})"
    )
    return 1 if reason.startswith("refused") else 0


def _purge_replica(args) -> int:
    """safe-purge --replica HOST:PORT: the zone replica's own binlog, kept from the oldest
    needed checkpoint's GTID position there (purge.safe_purge_replica)."""
    import dataclasses

    from zonesync.capture.purge import safe_purge_replica

    prefix = "zonesync binlog safe-purge"
    where = common.host_port(args.replica)
    if where is None:
        return common.fail(f"--replica: {args.replica!r}: give it as HOST:PORT, e.g. 10.0.0.8:3306", prefix)
    if args.to or args.before or args.older_than:
        return common.fail("--replica: takes no --to, --before or --older-than (it keeps what promotion needs)", prefix)
    ep = dataclasses.replace(common.zone_endpoint(args.zone), host=where[0], port=where[1])
    try:
        conn = ep.connect(database="")
    except Exception as exc:  # noqa: BLE001 - unreachable: one line
        return common.fail(f"--replica: {args.replica}: {exc}", prefix)
    try:
        purged_to, reason = safe_purge_replica(common.meta(), args.zone, conn, dry_run=args.dry_run)
    finally:
        conn.close()
    verb = "would purge" if args.dry_run else "purged"
    print(reason if purged_to is None else f"{verb} the replica's binlogs before {purged_to} ({reason})")
    return 0


def _purge_older(args) -> int:
    """safe-purge --before / --older-than: exit 0 when every file old enough went (or none
    was old enough), 1 when a consumer holds back old-enough files (they are listed, with
    who needs them; the files before them were purged all the same), 2 on a bad value."""
    from zonesync.capture.purge import AgeError, cutoff, purge_older

    try:
        limit = cutoff(before=args.before, older_than=args.older_than)
    except AgeError as exc:
        return common.fail(str(exc), "zonesync binlog safe-purge")
    source = common.primary_endpoint(args.zone)
    done = purge_older(common.meta(), args.zone, limit, dry_run=args.dry_run, source=source)
    verb = "would purge" if args.dry_run else "purged"
    if done.purged:
        print(f"{verb} {', '.join(done.purged)} (closed before {limit:%Y-%m-%d %H:%M:%S} UTC, no consumer needs them)")
    for name, closed, why in done.kept:
        print(f"kept {name} (closed {closed:%Y-%m-%d %H:%M:%S} UTC, old enough): {why}")
    if done.note:
        print(done.note)
    return 1 if done.kept else 0


def register(sub) -> None:
    binlog = sub.add_parser("binlog", help="binlog retention")
    bsub = binlog.add_subparsers(dest="binlog_command", required=True, metavar="ACTION")
    sp = bsub.add_parser(
        "safe-purge",
        help="purge only binlogs every consumer has confirmed past",
        description="Purge only binlog files every consumer has confirmed past. With --before or --older-than, "
        "only the files that are also old enough (closed before the cutoff) go. Exit 0: done (or nothing to "
        "purge); 1: --to refused, or old-enough files kept because a consumer still needs them (listed with who "
        "needs them; the files before them were purged); 2: a bad option value.",
    )
    sp.add_argument("--zone", required=True)
    sp.add_argument("--dry-run", action="store_true")
    which = sp.add_mutually_exclusive_group()
    which.add_argument(
        "--to",
        metavar="FILE",
        help="purge only the files before FILE; refused if a consumer still needs an earlier one",
    )
    which.add_argument(
        "--before",
        metavar="TIME",
        help="purge only files closed before TIME, UTC: 'YYYY-MM-DD HH:MM:SS' (or 'YYYY-MM-DD HH:MM', 'YYYY-MM-DD')",
    )
    which.add_argument(
        "--older-than",
        metavar="AGE",
        help="purge only files closed more than AGE ago: a whole number of days, hours or minutes (1d, 12h, 30m)",
    )
    sp.add_argument(
        "--replica",
        metavar="HOST:PORT",
        help="purge a replica of the zone instead: it keeps its binlog from the oldest needed checkpoint's GTID "
        "position, so that capture can go on there if it is promoted",
    )
    sp.set_defaults(func=cmd_safe_purge)
    bs = bsub.add_parser(
        "bootstrap",
        help="set where a zone's capture starts: a zone never captured, or one whose checkpoints were lost",
    )
    bs.add_argument("--zone", required=True)
    bs.add_argument(
        "--at",
        required=True,
        metavar="FILE:POS|current",
        help="the binlog position to capture from (refused while the zone has checkpoints)",
    )
    bs.set_defaults(func=cmd_bootstrap)
    sk = bsub.add_parser(
        "skip-lost",
        help="the file holding a zone's checkpoint is gone: capture goes on from the binlog's end",
        description="The binlog file holding the zone's newest checkpoint was purged or expired, so its replicator "
        "publishes nothing. Move the checkpoint to the binlog's current end (same LSNs: consumers see the chain "
        "go on); what the zone wrote in between reaches no consumer, so each other zone then needs a repair copy "
        "from it (printed). Exit 0: moved; 1: refused (the file is still there, or no checkpoint).",
    )
    sk.add_argument("--zone", required=True)
    sk.add_argument("--reason", required=True, help="why the lost changes are given up (kept in the alert)")
    sk.set_defaults(func=cmd_skip_lost)
