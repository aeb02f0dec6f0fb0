"""`zonesync replicate | apply | lag | reconcile | halt | restart | resume | alerts | binlog`: replication, by
command (`locks`: cli_locks.py)."""

from __future__ import annotations

import sys


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


def cmd_lag(args) -> int:
    from zonesync.apply.tools.progress import STALE_AFTER_S, lag_report
    from zonesync.capture import lag as capture_lag
    from zonesync.meta.db import MetaConfig

    meta = MetaConfig.from_env()
    rows = lag_report(meta)
    captured = capture_lag.report(meta)
    if not rows and not captured:
        print("no lag reported yet: are replicators and appliers running? (zonesync replicate|apply --zone NAME)")
        return 1
    stale = False
    if captured:
        # the capture side: commits a replicator has not read yet are behind for every target
        print(f"{'capture':<8} {'binlog bytes behind':>20} {'seconds behind':>15} {'reported':>10}")
        for z, behind, sec, age in captured:
            old = age > STALE_AFTER_S
            stale = stale or old
            note = f"  STALE: zone {z}'s replicator has not reported for {age:.0f} s (stopped?)" if old else ""
            print(f"{z:<8} {behind:>20} {sec:>15.3f} {age:>8.1f} s ago{note}")
    if rows:
        print(f"{'source':<8} {'target':<8} {'events behind':>14} {'seconds behind':>15} {'reported':>10}")
    for s, t, ev, sec, age, old in rows:
        stale = stale or old
        note = f"  STALE: zone {t}'s applier has not reported for {age:.0f} s (stopped?)" if old else ""
        print(f"{s:<8} {t:<8} {ev:>14} {sec:>15.3f} {age:>8.1f} s ago{note}")
    if args.partitions:
        detail, _ = meta.run(
            "SELECT source_zone, target_zone, partition_no, applied_lsn, behind_events, behind_seconds "
            "FROM apply_lag ORDER BY 1, 2, 3"
        )
        for s, t, p, lsn, ev, sec in detail:
            print(f"  {s}->{t} partition {p}: applied LSN {lsn}, {ev} behind, {sec:.3f} s")
    return 1 if stale else 0


def zone_conn(zone: str):
    import pymysql

    from zonesync.runtime.endpoints import zone_endpoint

    ep = zone_endpoint(zone)
    return pymysql.connect(
        host=ep.host,
        port=ep.port,
        user=ep.user,
        password=ep.password,
        database=ep.database,
        init_command="SET time_zone = '+00:00'",
    )


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

    conn = zone_conn(args.zone)
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


def zone_source(zone: str):
    """The zone's database as capture's binlog purge reaches it (runtime.endpoints.Endpoint)."""
    from zonesync.runtime.endpoints import zone_endpoint

    return zone_endpoint(zone)


def cmd_safe_purge(args) -> int:
    from zonesync.capture.purge import safe_purge
    from zonesync.events import EventError
    from zonesync.meta.db import MetaConfig

    if args.before is not None or args.older_than is not None:
        return _purge_older(args)
    try:
        purged_to, reason = safe_purge(
            MetaConfig.from_env(), args.zone, dry_run=args.dry_run, to_file=args.to, source=zone_source(args.zone)
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
    done = purge_older(MetaConfig.from_env(), args.zone, limit, dry_run=args.dry_run, source=zone_source(args.zone))
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
    from zonesync.apply.tools.reconcile import MISMATCH, OK, alert_differences, reconcile
    from zonesync.meta.db import MetaConfig

    meta = MetaConfig.from_env()
    conn = zone_conn(args.zone)
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


def cmd_halt(args) -> int:
    """ROLLBACK (and, with `restart`, RESTART: halt, let the applier drop what it holds for
    the partitions, resume from their applied LSN)."""
    import time

    from zonesync.apply.tools.progress import halt, resume

    conn = zone_conn(args.zone)
    try:
        why = args.why or f"halted by an operator (`zonesync {args.cmd}`)"
        halted = halt(conn, args.source, args.partition or None, why)
        if not halted:
            which = f"partition(s) {', '.join(map(str, args.partition))}" if args.partition else "no partition"
            print(f"zone {args.zone}: {which} of source {args.source} is running: nothing to {args.cmd}")
            return 1
        parts = ", ".join(map(str, halted))
        if args.cmd == "halt":
            print(f"zone {args.zone}: halted source {args.source} partition(s) {parts}; `zonesync resume` to go on")
            return 0
        time.sleep(args.settle)  # the applier notices within a second and pauses them
        resume(conn, args.source, halted)
    finally:
        conn.close()
    print(f"zone {args.zone}: restarted source {args.source} partition(s) {parts} from their applied LSN")
    return 0


def cmd_repartition(args) -> int:
    from zonesync import config
    from zonesync.meta.db import MetaConfig
    from zonesync.repartition import RepartitionRefused, repartition

    zones = [z.name for z in config.load().zones]
    try:
        done = repartition(MetaConfig.from_env(), zones, zone_conn, args.partitions)
    except RepartitionRefused as exc:
        print(f"zonesync topics repartition: refused, nothing changed: {exc}", file=sys.stderr)
        return 1
    for zone, (log_file, log_pos) in sorted(done.restarted.items()):
        print(f"zone {zone}: its chains restart at {log_file}:{log_pos}")
    print(
        f"epoch {done.epoch}: {done.partitions} partitions recorded for zones {', '.join(zones)}; every apply "
        f"position starts over. Now re-create the change topics with {done.partitions} partitions (the dev "
        f"broker: restart it), set ZONESYNC_KAFKA_PARTITIONS={done.partitions}, and start the workers."
    )
    return 0


def cmd_resume(args) -> int:
    from zonesync.apply.tools.progress import resume

    conn = zone_conn(args.zone)
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
    app.add_argument(
        "--atomic-transactions",
        action="store_true",
        help="a source transaction's rows become visible together, across partitions (rounds with such "
        "transactions run on one connection; default: $ZONESYNC_APPLY_ATOMIC_TRANSACTIONS)",
    )
    app.set_defaults(func=cmd_apply)
    lag = sub.add_parser("lag", help="replication lag per source and target zone")
    lag.add_argument("--partitions", action="store_true")
    lag.set_defaults(func=cmd_lag)
    rc = sub.add_parser("reconcile", help="published against committed event counts per partition (alerts differences)")
    rc.add_argument("--zone", required=True, help="the target zone")
    rc.add_argument("--source", action="append", help="only this source zone (repeatable)")
    rc.set_defaults(func=cmd_reconcile)
    rs = sub.add_parser("resume", help="set halted partitions of a source back to running (after the fix)")
    rs.add_argument("--zone", required=True, help="the target zone whose applier halted them")
    rs.add_argument("--source", required=True, help="the source zone of the halted partitions")
    rs.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
    rs.set_defaults(func=cmd_resume)
    for name, text in (
        ("halt", "halt running partitions of a source (in-flight batches are dropped; `zonesync resume` goes on)"),
        ("restart", "halt, then resume partitions of a source: the applier takes them again from their applied LSN"),
    ):
        hp = sub.add_parser(name, help=text)
        hp.add_argument("--zone", required=True, help="the target zone whose applier applies them")
        hp.add_argument("--source", required=True, help="the source zone of the partitions")
        hp.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
        if name == "halt":
            hp.add_argument("--why", help="recorded as the halt's detail")
        else:
            hp.add_argument("--settle", type=float, default=2.0, help="seconds between halt and resume (default 2)")
        hp.set_defaults(func=cmd_halt, cmd=name, why=None)
    tp = sub.add_parser("topics", help="the change topics: repartition (guarded: only when fully drained)")
    tsub = tp.add_subparsers(dest="topics_cmd", required=True)
    rp = tsub.add_parser(
        "repartition",
        help="change the partition count: refused while workers run or a zone is behind; restarts every chain",
    )
    rp.add_argument("--partitions", type=int, required=True, help="the new partition count")
    rp.set_defaults(func=cmd_repartition)
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
