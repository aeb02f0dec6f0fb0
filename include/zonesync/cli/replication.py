"""`zonesync lag | reconcile | resume | halt | restart | topics repartition | alerts`: watching and steering
replication (the workers: workers.py; binlogs: binlog.py; locked rows: locks.py)."""

from __future__ import annotations

import json
import sys

from zonesync.cli import common


def cmd_lag(args) -> int:
    from zonesync.apply.tools.progress import STALE_AFTER_S, lag_report
    from zonesync.capture import lag as capture_lag

    meta = common.meta()
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


def cmd_alerts(args) -> int:
    from zonesync.console import alert_help
    from zonesync.meta import alerts

    if args.ack:
        found = alerts.ack(common.meta(), args.ack)
        print(f"alert {args.ack} acknowledged" if found else f"no alert {args.ack}")
        return 0
    rows = alerts.open_alerts(common.meta(), limit=10_000)
    for a in alert_help.annotate(rows, common.zone_names()):  # each with what settles it
        print(f"#{a['id']} {a['at'][:26].replace('T', ' ')} zone {a['zone']} {a['kind']}: {json.dumps(a['detail'])}")
        if a["resolve"]:
            print(f"    resolve: {a['resolve']}")
        print(f"    {a['hint']} ({a['doc']})")
    if not rows:
        print("no open alerts")
    return 1 if rows else 0


def cmd_reconcile(args) -> int:
    """Published against committed event counts per (source, partition) of a target zone
    (seed S002-10); a difference is alerted and exits 1."""
    from zonesync.apply.tools.reconcile import MISMATCH, OK, alert_differences, reconcile

    meta = common.meta()
    conn = common.zone_conn(args.zone)
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

    conn = common.zone_conn(args.zone)
    try:
        why = args.why or f"halted by an operator (`zonesync {args.cmd}`)"
        halted = halt(conn, args.source, args.partition or None, why)
        if not halted:
            which = f"partition(s) {common.numbers(args.partition)}" if args.partition else "no partition"
            print(f"zone {args.zone}: {which} of source {args.source} is running: nothing to {args.cmd}")
            return 1
        parts = common.numbers(halted)
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
    from zonesync.repartition import RepartitionRefused, repartition

    zones = common.zone_names()
    try:
        done = repartition(common.meta(), zones, common.zone_conn, args.partitions)
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

    conn = common.zone_conn(args.zone)
    try:
        resumed = resume(conn, args.source, args.partition or None)
    finally:
        conn.close()
    if not resumed:
        which = f"partition(s) {common.numbers(args.partition)}" if args.partition else "no partition"
        print(f"zone {args.zone}: {which} of source {args.source} is halted: nothing to resume")
        return 1
    print(f"zone {args.zone}: resumed source {args.source} partition(s) {common.numbers(resumed)}")
    return 0


def register(sub) -> None:
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
    al = sub.add_parser("alerts", help="open alerts (halted partitions, locked rows) and what resolves each; --ack ID")
    al.add_argument("--ack", type=int)
    al.set_defaults(func=cmd_alerts)
