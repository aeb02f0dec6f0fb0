"""`zonesync locks`: rows of a zone whose replicated changes are held (data locks).

list what is locked; `add` a lock by hand (S000-66: the row's changes are held from
now on); `resolve` one after repairing it (S003-31: the source zone's current row is
re-read; a manual lock's held changes are applied in order, or skipped by version).
"""

from __future__ import annotations

import json
import sys

from zonesync.cli import common


def cmd_locks(args) -> int:
    from zonesync.apply.bookkeeping.row_locks import lock_list

    if args.action in ("add", "resolve"):
        return _lock_change(args)
    conn = common.zone_conn(args.zone)
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
    from zonesync.apply.tools.owner_row import read_row

    conn = common.zone_conn(zone)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            return read_row(cur, table, key)
    finally:
        conn.close()


def _lock_change(args) -> int:
    """locks add (a manual lock: the row's events are held from now on, as for a mismatch)
    and locks resolve (unlock; a manual lock's held events are applied in order, or skipped
    by version). Exit 2 names a missing or unusable field."""
    from zonesync.apply.tools import lock_commands as locks
    from zonesync.meta import alerts
    from zonesync.runtime import transport

    need = ["--table", "--pk"] + (["--reason"] if args.action == "add" else [])
    missing = [f for f in need if not getattr(args, f[2:].replace("-", "_"))]
    if missing:
        return common.fail(
            f"{' and '.join(missing)} required (--pk: a JSON list of key values, e.g. '[42]')",
            f"zonesync locks {args.action}",
        )
    writer = common.zone_writer(args.zone)
    try:
        if args.action == "add":
            sources = [z for z in common.zone_names() if z != args.zone]
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
        return common.fail(str(exc), f"zonesync locks {args.action}")
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
            common.meta(),
            args.zone,
            "row_locked",
            {"table": args.table, "pk": args.pk, "reason": reason, "on": "locks resolve"},
        )
        print(f"{args.table} {args.pk}: locked again: {reason}")
    return 1 if done.relocked else 0


def register(sub) -> None:
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
