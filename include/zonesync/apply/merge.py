"""Merging a batch per primary key (Otter's 合并算法), a pure function.

Consecutive events of one row collapse into one net change that keeps what the
apply decision needs: the row image before the first event (for the data-lock
check), the image after the last (what to write), and the last version.

    insert + update  -> insert of the last image
    update + update  -> update from the first old to the last new
    update + delete  -> delete of the first old
    insert + delete  -> a tombstone only (the row never shows up)
    delete + insert  -> update from the deleted row to the new one
    delete + delete  -> delete, with the newer version
    update + insert  -> insert of the newer row (a copied row after an increment:
                        the version decides, no old-row check)
    delete + update  -> the same: an upsert of the newer row, version-guarded

The last two cannot come from one binlog (a key is updated only while it
exists, inserted only while it does not); they arise when a copy's rows and the
stream's meet (seed 003, 数据迁移+数据增量场景), and the insert or update that
follows carries no old row the target could be expected to hold.

Order across rows is not kept and need not be: rows are independent, and each
row's events come from one partition in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.capture.event import DELETE, INSERT, UPDATE, ChangeEvent


@dataclass(slots=True)  # one per row: smaller, and quicker to build and read
class NetChange:
    table: str
    pk: dict
    pk_text: str
    first_op: str
    last_op: str
    old: dict | None  # encoded image before the first event (None when it was an insert)
    new: dict | None  # encoded image after the last event (None when it was a delete)
    version: int  # version of the last event
    events: int
    first_event: ChangeEvent
    # the events after the first (None for a lone event, most rows): their images tell what
    # versions of this row the change carries (decide.py, an insert meeting a row)
    later: list[ChangeEvent] | None = None


# update + insert, delete + update: the newer row, version-guarded (no old row to check)
_NEWER_ROW_ONLY = frozenset(((UPDATE, INSERT), (DELETE, UPDATE)))


def merge(events: list[ChangeEvent]) -> list[NetChange]:
    """Net change per (table, pk), in first-seen order."""
    out: dict[tuple[str, str], NetChange] = {}
    for e in events:
        key = e.key()
        cur = out.get(key)
        if cur is None:
            out[key] = NetChange(
                table=e.table,
                pk=e.pk,
                pk_text=key[1],
                first_op=e.op,
                last_op=e.op,
                old=None if e.op == INSERT else e.old,
                new=None if e.op == DELETE else e.new,
                version=e.version,
                events=1,
                first_event=e,
            )
        else:
            if (cur.last_op, e.op) in _NEWER_ROW_ONLY:
                cur.first_op, cur.old = INSERT, None
            cur.last_op = e.op
            cur.new = None if e.op == DELETE else e.new
            cur.version = e.version
            cur.events += 1
            if cur.later is None:
                cur.later = [e]
            else:
                cur.later.append(e)
    return list(out.values())
