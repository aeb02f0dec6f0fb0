"""`zonesync replicate | apply | lag | locks | reconcile | resume | alerts | binlog`: replication, by command."""

from __future__ import annotations

import json
import sys


def cmd_replicate(args) -> int:
    from zonesync import workers

    return workers.run_forever(workers.build_replicator(args.zone, args.server_id))


def cmd_apply(args) -> int:
    from zonesync import workers

    try:
        weights = workers.parse_table_weights(args.table_weights) if args.table_weights else None
    except ValueError as exc:
        raise SystemExit(f"zonesync apply: {exc}") from None
    return workers.run_forever(workers.build_applier(args.zone, args.workers, table_weights=weights, group=args.group))


def cmd_lag(args) -> int:
    from zonesync.apply.progress import lag_report
    from zonesync.meta.db import MetaConfig

    meta = MetaConfig.from_env()
    rows = lag_report(meta)
    if not rows:
        print("no lag reported yet: are appliers running? (zonesync apply --zone NAME)")
        return 1
    print(f"{'source':<8} {'target':<8} {'events behind':>14} {'seconds behind':>15} {'reported':>10}")
    for s, t, ev, sec, age, stale in rows:
        note = f"  STALE: zone {t}'s applier has not reported for {age:.0f} s (stopped?)" if stale else ""
        print(f"{s:<8} {t:<8} {ev:>14} {sec:>15.3f} {age:>8.1f} s ago{note}")
    if args.partitions:
        detail, _ = meta.run(
            "SELECT source_zone, target_zone, partition_no, applied_lsn, behind_events, behind_seconds "
            "FROM apply_lag ORDER BY 1, 2, 3"
        )
        for s, t, p, lsn, ev, sec in detail:
            print(f"  {s}->{t} partition {p}: applied LSN {lsn}, {ev} behind, {sec:.3f} s")
    return 1 if any(r[5] for r in rows) else 0


def _zone_conn(zone: str):
    import pymysql

    from zonesync.workers import zone_endpoint

    ep = zone_endpoint(zone)
    return pymysql.connect(
        host=ep.host,
        port=ep.port,
        user=ep.user,
        password=ep.password,
        database=ep.database,
        init_command="SET time_zone = '+00:00'",
    )


def cmd_locks(args) -> int:
    from zonesync.apply.writer import lock_list

    if args.action in ("add", "resolve"):
        return _lock_change(args)
    conn = _zone_conn(args.zone)
    try:
        locks = lock_list(conn)
    finally:
        conn.close()
    if not locks:
        print(f"no locked rows in zone {args.zone}")
        return 0
    for lock in locks:
        print(
            f"{lock['table']} pk={json.dumps(lock['pk'])} held={lock['held_events']} since {lock['locked_at']}: "
            f"{lock['reason']}"
        )
    return 1


def _source_row(zone: str, table: str, key: dict) -> dict | None:
    """A row of `zone` by primary key, as its columns' values (locks resolve, S003-31)."""
    import pymysql

    from zonesync.apply.statements import q

    conn = _zone_conn(zone)
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            where = " AND ".join(f"{q(c)} = %s" for c in key)
            cur.execute(f"SELECT * FROM {q(table)} WHERE {where}", list(key.values()))
            return cur.fetchone()
    finally:
        conn.close()


def _lock_change(args) -> int:
    """locks add (a manual lock: the row's events are held from now on, as for a mismatch)
    and locks resolve (unlock; a manual lock's held events are applied in order, or skipped
    by version). Exit 2 names a missing or unusable field."""
    from zonesync import config, transport
    from zonesync.apply import locks
    from zonesync.apply.writer import ZoneWriter
    from zonesync.meta import alerts
    from zonesync.meta.db import MetaConfig
    from zonesync.workers import zone_endpoint

    need = ["--table", "--pk"] + (["--reason"] if args.action == "add" else [])
    missing = [f for f in need if not getattr(args, f[2:].replace("-", "_"))]
    if missing:
        print(
            f"zonesync locks {args.action}: {' and '.join(missing)} required (--pk: a JSON list of key values, "
            "e.g. '[42]')",
            file=sys.stderr,
        )
        return 2
    ep = zone_endpoint(args.zone)
    writer = ZoneWriter(ep.host, ep.port, ep.user, ep.password, ep.database)
    try:
        if args.action == "add":
            sources = [z.name for z in config.load().zones if z.name != args.zone]
            added, text = locks.add(writer, args.table, args.pk, args.reason, sources, transport.partitions())
            print(
                f"{args.table} {text}: locked in zone {args.zone}; its changes are held until `locks resolve`"
                if added
                else text
            )
            return 0 if added else 1
        done = locks.resolve(
            writer, args.table, args.pk, transport.topic, transport.bootstrap, args.drop_held, source_row=_source_row
        )
    except locks.LockError as exc:
        print(f"zonesync locks {args.action}: {exc}", file=sys.stderr)
        return 2
    except locks.HeldEventsLost as exc:
        print(f"zonesync locks resolve: {exc}", file=sys.stderr)
        return 1
    finally:
        writer.close()
    if not done.found:
        print(f"{args.table} {args.pk}: was not locked")
        return 1
    line = f"{args.table} {args.pk}: unlocked"
    if done.taken_from is not None:
        took = "deleted it here too" if done.source_row_gone else "took its current row"
        line += f"; zone {done.taken_from}, whose change locked it, re-read: {took}"
    if done.manual and not args.drop_held:
        released = ", ".join(f"{n} from {s}" for s, n in done.released.items()) or "none"
        line += f"; held events released: {released} ({done.applied} applied, {done.skipped} skipped by version)"
    print(line)
    for reason in done.relocked:  # a released change met another row than its old row: locked again
        alerts.record(
            MetaConfig.from_env(),
            args.zone,
            "row_locked",
            {"table": args.table, "pk": args.pk, "reason": reason, "on": "locks resolve"},
        )
        print(f"{args.table} {args.pk}: locked again: {reason}")
    return 1 if done.relocked else 0


def cmd_alerts(args) -> int:
    from zonesync.meta.db import MetaConfig

    conn = MetaConfig.from_env().connect()
    with conn.cursor() as cur:
        if args.ack:
            cur.execute("UPDATE alerts SET acked = 1 WHERE id = %s", (args.ack,))
            print(f"alert {args.ack} acknowledged" if cur.rowcount else f"no alert {args.ack}")
            return 0
        cur.execute("SELECT id, at, zone, kind, detail FROM alerts WHERE acked = 0 ORDER BY id")
        rows = cur.fetchall()
    conn.close()
    for i, at, zone, kind, detail in rows:
        print(f"#{i} {at} zone {zone} {kind}: {detail}")
    if not rows:
        print("no open alerts")
    return 1 if rows else 0


def cmd_bootstrap(args) -> int:
    """Set where a zone's capture starts (seed S001-09): for a zone never captured, or one
    whose checkpoint history was lost (the replicator refuses to guess)."""
    from zonesync.capture.binlog import binlog_end
    from zonesync.capture.start import bootstrap
    from zonesync.meta.db import MetaConfig
    from zonesync.meta.store import default_actor

    conn = _zone_conn(args.zone)
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
    bootstrap(MetaConfig.from_env(), args.zone, log_file, log_pos, f"zonesync binlog bootstrap by {default_actor()}")
    print(f"zone {args.zone}: capture starts at {log_file}:{log_pos}; its consumers see a new chain")
    return 0


def cmd_safe_purge(args) -> int:
    from zonesync.capture.event import EventError
    from zonesync.capture.purge import safe_purge
    from zonesync.meta.db import MetaConfig

    if args.before is not None or args.older_than is not None:
        return _purge_older(args)
    try:
        purged_to, reason = safe_purge(MetaConfig.from_env(), args.zone, dry_run=args.dry_run, to_file=args.to)
    except EventError as exc:  # --to is not a binlog file name
        print(f"--to: {exc}: give a file name as `SHOW BINARY LOGS` lists it, e.g. binlog.000012")
        return 2
    print(
        reason
        if purged_to is None
        else f"{'would purge' if args.dry_run else 'purged'} binlogs before {purged_to} ({reason})"
    )
    return 1 if reason.startswith("refused") else 0


def _purge_older(args) -> int:
    """safe-purge --before / --older-than: exit 0 when every file old enough went (or none
    was old enough), 1 when a consumer holds back old-enough files (they are listed, with
    who needs them; the files before them were purged all the same), 2 on a bad value."""
    from zonesync.capture.purge import AgeError, cutoff, purge_older
    from zonesync.meta.db import MetaConfig

    try:
        limit = cutoff(before=args.before, older_than=args.older_than)
    except AgeError as exc:
        print(f"zonesync binlog safe-purge: {exc}", file=sys.stderr)
        return 2
    done = purge_older(MetaConfig.from_env(), args.zone, limit, dry_run=args.dry_run)
    verb = "would purge" if args.dry_run else "purged"
    if done.purged:
        print(f"{verb} {', '.join(done.purged)} (closed before {limit:%Y-%m-%d %H:%M:%S} UTC, no consumer needs them)")
    for name, closed, why in done.kept:
        print(f"kept {name} (closed {closed:%Y-%m-%d %H:%M:%S} UTC, old enough): {why}")
    if done.note:
        print(done.note)
    return 1 if done.kept else 0


def cmd_reconcile(args) -> int:
    """Published against committed event counts per (source, partition) of a target zone
    (seed S002-10); a difference is alerted and exits 1."""
    from zonesync.apply.reconcile import MISMATCH, OK, alert_differences, reconcile
    from zonesync.meta.db import MetaConfig

    meta = MetaConfig.from_env()
    conn = _zone_conn(args.zone)
    try:
        rows = reconcile(meta, conn, args.source)
    finally:
        conn.close()
    print(f"{'source':<7} {'part':>4} {'applied LSN':>20} {'published':>10} {'committed':>10}  status")
    for r in rows:
        published = "-" if r.published is None else str(r.published)
        print(f"{r.source:<7} {r.partition:>4} {r.applied_lsn:>20} {published:>10} {r.committed:>10}  {r.status}")
    wrong = alert_differences(meta, args.zone, rows)
    waiting = sum(1 for r in rows if r.status not in (OK, MISMATCH))
    print(
        f"zone {args.zone}: {sum(r.status == OK for r in rows)} partition(s) reconciled, {wrong} differ"
        + (f", {waiting} not comparable now (run again once `zonesync lag` shows them caught up)" if waiting else "")
    )
    return 1 if wrong else 0


def cmd_resume(args) -> int:
    from zonesync.apply.progress import resume

    conn = _zone_conn(args.zone)
    try:
        resumed = resume(conn, args.source, args.partition or None)
    finally:
        conn.close()
    if not resumed:
        which = f"partition(s) {', '.join(map(str, args.partition))}" if args.partition else "no partition"
        print(f"zone {args.zone}: {which} of source {args.source} is halted: nothing to resume")
        return 1
    print(f"zone {args.zone}: resumed source {args.source} partition(s) {', '.join(map(str, resumed))}")
    return 0


def register(sub) -> None:
    rep = sub.add_parser("replicate", help="run the replicator of a zone (binlog -> Kafka) in the foreground")
    rep.add_argument("--zone", required=True)
    rep.add_argument("--server-id", type=int, help="binlog reader server_id (default 4000 + zone id)")
    rep.set_defaults(func=cmd_replicate)
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
    app.set_defaults(func=cmd_apply)
    lag = sub.add_parser("lag", help="replication lag per source and target zone")
    lag.add_argument("--partitions", action="store_true")
    lag.set_defaults(func=cmd_lag)
    locks = sub.add_parser(
        "locks",
        help="locked rows: list; add (a manual lock); resolve (after repairing one)",
        description="Rows of a zone whose replicated changes are held: locked by a mismatch, or by hand with "
        "`locks add`. `locks resolve` unlocks one; a manual lock's held changes are then applied in order "
        "(or skipped by version), an automatic lock's were dropped: repair the row from its owner first. "
        "Exit 1: rows are locked (list), already locked (add), not locked or locked again (resolve); "
        "2: a missing or unusable --table, --pk or --reason.",
    )
    locks.add_argument("action", nargs="?", choices=["list", "add", "resolve"], default="list")
    locks.add_argument("--zone", required=True)
    locks.add_argument("--table")
    locks.add_argument(
        "--pk",
        help='primary key values as JSON, as `locks list` prints them, e.g. "[42]" (or by column: {"id": 42})',
    )
    locks.add_argument("--reason", help="locks add: why (shown by `locks list`)")
    locks.add_argument(
        "--drop-held",
        action="store_true",
        help="locks resolve: unlock without applying the held changes (gone from the broker; row repaired by hand)",
    )
    locks.set_defaults(func=cmd_locks)
    rc = sub.add_parser("reconcile", help="published against committed event counts per partition (alerts differences)")
    rc.add_argument("--zone", required=True, help="the target zone")
    rc.add_argument("--source", action="append", help="only this source zone (repeatable)")
    rc.set_defaults(func=cmd_reconcile)
    rs = sub.add_parser("resume", help="set halted partitions of a source back to running (after the fix)")
    rs.add_argument("--zone", required=True, help="the target zone whose applier halted them")
    rs.add_argument("--source", required=True, help="the source zone of the halted partitions")
    rs.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
    rs.set_defaults(func=cmd_resume)
    al = sub.add_parser("alerts", help="open alerts (halted partitions, locked rows); --ack ID")
    al.add_argument("--ack", type=int)
    al.set_defaults(func=cmd_alerts)
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
