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

The last two arise when a copy's rows and the stream's meet (seed 003,
数据迁移+数据增量场景), and the insert or update that follows carries no old row
the target could be expected to hold. One binlog gives them only when the source
applied another zone's delete or re-insert in between (its loop filter keeps that
out of the stream); the merged change then lands the source's last row, where one
by one would lock or wait (seed rules S003-13, S003-17, S003-18).

An update or delete whose old row is not the row the change so far ends with (a
gap: the source applied another zone's write in between, which its loop filter
keeps out of its stream, or the row was changed behind its back) restarts the
net change there: its old row is that event's, and so is its first event; the
earlier events still count but are not written. One by one, they would land and
the gap's event would then wait for the missing write or lock (decide.py); a
change from the first old row to the last new one would land over the gap
unchecked. Restarted, a target without the gap's old row waits or locks before
any of them (the serial retry then applies them one by one), and a target that
has it has them too (they are older: the version guard skips them).

Order across rows is not kept and need not be: rows are independent, and each
row's events come from one partition in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.events import DELETE, INSERT, UPDATE, ChangeEvent


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

    def after(self, version: int) -> NetChange | None:
        """The net change of this change's events above `version` (None when there are none):
        what the events one by one would still change in a target already at that version."""
        rest = [e for e in (self.first_event, *(self.later or ())) if e.version > version]
        return merge(rest)[0] if rest else None


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
        elif e.op != INSERT and cur.new is not None and e.old != cur.new:
            # a gap (see above): the net change restarts at this event, the earlier ones only counted
            cur.first_op, cur.last_op, cur.old, cur.new = e.op, e.op, e.old, None if e.op == DELETE else e.new
            cur.version, cur.first_event, cur.later = e.version, e, None
            cur.events += 1
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
