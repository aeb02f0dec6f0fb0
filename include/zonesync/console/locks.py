"""Locked rows (data locks) as the console and `zonesync locks` see and settle them: list
them per zone, add one by hand, resolve one. The protocol is apply/tools/lock_commands.py;
this is its wiring (the zones, the broker, the source rows, the alerts) shared by the
command and the HTTP API.
"""

from __future__ import annotations

from zonesync.apply.bookkeeping.row_locks import lock_list
from zonesync.apply.tools import lock_commands
from zonesync.apply.tools.lock_commands import HeldEventsLost, LockError
from zonesync.meta import alerts
from zonesync.meta.db import MetaConfig
from zonesync.runtime import transport

__all__ = ["HeldEventsLost", "LockError", "add", "listed", "resolve"]


def listed(zone: str, zone_conn) -> list[dict]:
    """The zone's locked rows, each with the command that resolves it."""
    import json

    conn = zone_conn(zone)
    try:
        found = lock_list(conn)
    finally:
        conn.close()
    return [{**lock, "resolve": f"zonesync locks resolve --zone {zone} --table {lock['table']} "
                                f"--pk '{json.dumps(lock['pk'])}'"} for lock in found]  # fmt: skip


def add(zone: str, table: str, pk: str, reason: str, zones: list[str], zone_writer) -> dict:
    """A manual lock (S000-66): the row's changes are held from now on. {"added", "text"}."""
    writer = zone_writer(zone)
    try:
        sources = [z for z in zones if z != zone]
        added, text = lock_commands.add(writer, table, pk, reason, sources, transport.partitions())
    finally:
        writer.close()
    line = f"{table} {text}: locked in zone {zone}; its changes are held until `locks resolve`" if added else text
    return {"added": added, "line": line}


def resolve(meta: MetaConfig, zone: str, table: str, pk: str, drop_held: bool, zone_writer, zone_conn) -> dict:
    """Unlock a row after repairing it (S003-31): the source zone's current row is re-read;
    a manual lock's held changes are applied in order, or skipped by version (none with
    `drop_held`). A released change that meets another row locks it again, alerted.
    {"found", "relocked": [reasons], "line"}; raises LockError (a bad table or key) or
    HeldEventsLost (the held changes are gone from the broker)."""

    def source_row(source: str, tbl: str, key: dict) -> dict | None:
        from zonesync.apply.tools.owner_row import read_row

        conn = zone_conn(source)
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION time_zone = '+00:00'")
                return read_row(cur, tbl, key)
        finally:
            conn.close()

    writer = zone_writer(zone)
    try:
        done = lock_commands.resolve(writer, table, pk, transport.topic, transport.bootstrap, drop_held,
                                     source_row=source_row)  # fmt: skip
    finally:
        writer.close()
    if not done.found:
        return {"found": False, "relocked": [], "line": f"{table} {pk}: was not locked"}
    line = f"{table} {pk}: unlocked"
    if done.taken_from is not None:
        took = "deleted it here too" if done.source_row_gone else "took its current row"
        line += f"; zone {done.taken_from}, whose change locked it, re-read: {took}"
    if done.manual and not drop_held:
        released = ", ".join(f"{n} from {s}" for s, n in done.released.items()) or "none"
        line += f"; held events released: {released} ({done.applied} applied, {done.skipped} skipped by version)"
    for reason in done.relocked:  # a released change met another row than its old row: locked again
        alerts.record(meta, zone, "row_locked", {"table": table, "pk": pk, "reason": reason, "on": "locks resolve"})
    return {"found": True, "relocked": list(done.relocked), "line": line}
