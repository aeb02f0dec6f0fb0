"""Data locks as the writer records them: a row whose change did not fit the target.

When a change's old row (or an insert's lineage, decide.py) does not match the
target row, the row is locked in zonesync.row_locks: the change is skipped, and
so is every later change of that row, counted as held, until `zonesync locks
resolve` (tools/lock_commands.py). The lock row keeps the first event that met the mismatch;
later ones only add to held_events, so a lock costs one small row however long
the row stays locked.
"""

from __future__ import annotations

import json

from zonesync.events import ChangeEvent


def held(lit, name: str, change) -> str:
    """Count a locked row's change as held (`change`: batch/merge.py's NetChange)."""
    return (
        f"UPDATE zonesync.row_locks SET held_events = held_events + {change.events} "
        f"WHERE table_name = {name} AND pk = {lit(change.pk_text)}"
    )


def lock(lit, name: str, change, reason: str) -> str:
    """Lock a row: the first event is the one that locked it; merged later ones are held."""
    return (
        "INSERT INTO zonesync.row_locks (table_name, pk, reason, first_event, held_events) VALUES "
        f"({name}, {lit(change.pk_text)}, {lit(reason[:500])}, {lit(_ascii_json(change.first_event))}, "
        f"{change.events - 1}) ON DUPLICATE KEY UPDATE held_events = held_events + {change.events}"
    )


def _ascii_json(event: ChangeEvent) -> str:
    """The event as JSON with \\u escapes: it fits row_locks.first_event whatever the
    `zonesync` database's character set (the wire form is raw UTF-8). Rare: locks only."""
    return json.dumps(json.loads(event.to_json()), separators=(",", ":"))


def lock_list(conn) -> list[dict]:
    with conn.cursor() as cur:
        cur.execute("SELECT table_name, pk, reason, held_events, locked_at, first_event FROM zonesync.row_locks")
        rows = cur.fetchall()
    return [
        {"table": t, "pk": json.loads(pk), "reason": r, "held_events": int(h), "locked_at": at, "event": e}
        for t, pk, r, h, at, e in rows
    ]
