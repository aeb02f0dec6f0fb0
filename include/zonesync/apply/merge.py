"""Merging a batch per primary key (Otter's 合并算法), a pure function.

Consecutive events of one row collapse into one net change that keeps what the
apply decision needs: the row image before the first event (for the data-lock
check), the image after the last (what to write), and the last version.

    insert + update  -> insert of the last image
    update + update  -> update from the first old to the last new
    update + delete  -> delete of the first old
    insert + delete  -> a tombstone only (the row never shows up)
    delete + insert  -> update from the deleted row to the new one

Order across rows is not kept and need not be: rows are independent, and each
row's events come from one partition in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.capture.event import DELETE, INSERT, ChangeEvent


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
            cur.last_op = e.op
            cur.new = None if e.op == DELETE else e.new
            cur.version = e.version
            cur.events += 1
    return list(out.values())
