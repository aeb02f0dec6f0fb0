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
    from zonesync.console import locks

    if args.action in ("add", "resolve"):
        return _lock_change(args)
    found = locks.listed(args.zone, common.zone_conn)
    if not found:
        print(f"no locked rows in zone {args.zone}")
        return 0
    for lock in found:
        print(
            f"{lock['table']} pk={json.dumps(lock['pk'])} held={lock['held_events']} since {lock['locked_at']}: "
            f"{lock['reason']}"
        )
    return 1


def _lock_change(args) -> int:
    """locks add (a manual lock: the row's events are held from now on, as for a mismatch)
    and locks resolve (console/locks.py). Exit 2 names a missing or unusable field."""
    from zonesync.console import locks

    need = ["--table", "--pk"] + (["--reason"] if args.action == "add" else [])
    missing = [f for f in need if not getattr(args, f[2:].replace("-", "_"))]
    if missing:
        return common.fail(
            f"{' and '.join(missing)} required (--pk: a JSON list of key values, e.g. '[42]')",
            f"zonesync locks {args.action}",
        )
    try:
        if args.action == "add":
            done = locks.add(args.zone, args.table, args.pk, args.reason, common.zone_names(), common.zone_writer)
            print(done["line"])
            return 0 if done["added"] else 1
        done = locks.resolve(common.meta(), args.zone, args.table, args.pk, args.drop_held, common.zone_writer,
                             common.zone_conn)  # fmt: skip
    except locks.LockError as exc:
        return common.fail(str(exc), f"zonesync locks {args.action}")
    except locks.HeldEventsLost as exc:
        print(f"zonesync locks resolve: {exc}", file=sys.stderr)
        return 1
    print(done["line"])
    for reason in done["relocked"]:
        print(f"{args.table} {args.pk}: locked again: {reason}")
    return 0 if done["found"] and not done["relocked"] else 1


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
