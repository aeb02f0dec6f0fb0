"""What to do with one net change against the target row: a pure function.

Rules (seed 000 数据同步幂等 and 数据锁定, with the seed's inverted comparison
put the right way round):

- A version at or below what the target already has (the row's version, or
  the tombstone's when the row is gone) is a replay or is older: skip it. Never
  lock on it: the target being newer is not a mismatch (a zone can receive the
  new owner's write before the old owner's last ones).
- A change that starts with an update or delete carries the old row: it lands
  only when the target row is exactly that old row. Otherwise the row was
  changed behind the applier's back, or a change was lost: lock it, skip it,
  and say why. Except when the target is behind that old row (see "Waiting").
- A change that starts with an insert lands when the key is free (no row, and
  no tombstone at its version or newer). When the key is taken, see "Inserts
  meeting a row" below: never an update of another entity's row.
- The merges that end in the newer row only (update + insert, delete + update:
  a copy's row meeting the stream, merge.py) carry no old row and were no
  creation: version-guarded, no check.

Inserts meeting a row (seed 004 6.3, S004-36: an `INSERT … ON DUPLICATE KEY
UPDATE` turned two unrelated rows with the same id into one). An insert creates
a row: its image's (_zs_origin, _zs_version) names that creation, and every later
version of the same row has a greater version (the guard's updates write
GREATEST(version + 1, now); a re-insert after a delete outranks the tombstone).
What a row is, is what the events of this change carry: the insert's image and
the old and new images of the events merged after it (an old image may be
another zone's write the source had applied). Against a target row T:

1. T's (origin, version) is one of those images: T is this row. A replay (the
   applier forgot its position, a resend): T's version is at or above the
   change's, skip. Otherwise the rest of the change is new to T, and lands when T
   is exactly that image (else T was changed behind the applier's back: lock, as
   an update's old-row mismatch).
2. T is newer than the insert and than everything the change carries: skip.
   This is a later version of the row (the insert's updates already landed: a
   replay), or an unrelated row that is newer; from the target alone the two
   cannot be told apart, and skipping writes nothing over either. An unrelated
   newer row is caught where the older one lives: the zone holding the other row
   receives T's insert (older than T, not T's lineage: case 3) or, if that row
   was updated past T's version meanwhile, T's zone receives the update whose old
   image T is not (a lock there).
3. Anything else locks the row (data lock, the same as an old-row mismatch):
   T is older than the insert (an unrelated row, whatever its version: the
   version guard alone would overwrite it), or as new as it with another origin,
   or between the insert and the change's last version without being one of its
   images (not a state of this row the source built on). The row keeps T; the
   change and later ones are held until `zonesync locks resolve`.

Waiting (S000-48, the seed's 数据锁定 judged across sources): an update or delete
whose old row is newer than the target row (target version < old row's version),
or whose row the target lacks with no tombstone at or above the old row's version,
did not meet a row changed behind the applier's back: the target has not yet
received the versions in between, and they come from another source zone's stream
(ownership moved: b's update of a row reaches c before a's last update of it).
Locking there would lock a row that converges a moment later. The answer is WAIT:
the writer stops that partition just before the event and retries it (serially,
in source order, unique_keys.py), and the applier locks the row only if the
versions between have still not arrived after `behind_timeout` (applier.py). A
change behind the applier's back cannot look like this: a guarded write makes the
version newer than the replicated one, and an unguarded write leaves it as it was
(equal: lock at once).

A re-insert after a delete meets no row (the delete went first: same partition,
in order), or, merged with its delete (delete + insert), is checked as the delete
is: by the deleted row's old image.

Copy mode (seed 000, Incremental Copy; S000-70 to S000-76): while an online full copy
fills a table in this zone (the table is listed in the zone's zonesync.copy_tables),
the target may lack rows the stream updates or deletes (the copy has not brought them
yet) or hold rows newer than a replayed event (the copy read them later). Neither is
a mismatch, so the version alone decides: a change at or below the target row's
version (or, with no row, its tombstone's) is skipped; otherwise it lands as its full
new row (an upsert, whatever its first event was: an insert, an update, or an insert
meeting a row), or, when it ends in a delete, as a delete of the target row and its
tombstone (a tombstone only when the target lacks the row). Never a wait, and no new
lock (a row already locked stays held) except for a resident table's row that meets
another entity's row with its key at the target (a migration's rows moving into a zone
whose own rows share keys with them): locked, never overwritten. The copy writes the same rows on other
connections meanwhile, so the statements are version-guarded too (write_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.apply.batch.merge import NetChange
from zonesync.events import INSERT

UPSERT, DELETE_ROW, TOMBSTONE, SKIP, LOCK, WAIT = "upsert", "delete", "tombstone", "skip", "lock", "wait"


@dataclass(frozen=True)
class Action:
    kind: str
    reason: str = ""


# The reason-less outcomes, built once: decide() runs for every row of a batch.
_PLAIN = {kind: Action(kind) for kind in (UPSERT, DELETE_ROW, TOMBSTONE)}
_LOCKED = Action(SKIP, "row is locked: held until `zonesync locks resolve`")
_NOT_NEWER = Action(SKIP, "target already has this version or a newer one")
_DELETED = Action(SKIP, "row was deleted at this version or a newer one")


def decide(
    change: NetChange,
    target: dict | None,
    tombstone_version: int | None,
    locked: bool,
    copying: bool = False,
    entity_column: str | None = None,
) -> Action:
    """`target` is the encoded target row (None when absent); `copying`: the table is in
    copy mode (see "Copy mode" above); `entity_column`: a resident table's (resident.py),
    whose rows in copy mode must also be the change's entity's (see "Copy mode")."""
    if locked:
        return _LOCKED
    if copying:
        if target is not None and entity_column is not None:
            other = _another_entitys_row(change, target, entity_column)
            if other is not None:
                return other
        return _by_version_only(change, target, tombstone_version)
    if change.later is not None:  # merged: judged from where the target stands inside it
        inside = _inside(change, target, tombstone_version)
        if inside is not None:
            return inside
    if target is not None and change.first_event.op == INSERT:
        return _insert_meets_row(change, target)
    if target is not None and int(target.get("_zs_version") or 0) >= change.version:
        return _NOT_NEWER
    if target is None and tombstone_version is not None and tombstone_version >= change.version:
        return _DELETED
    final = _PLAIN[UPSERT if change.new is not None else (DELETE_ROW if target is not None else TOMBSTONE)]
    if change.first_op == INSERT:
        return final
    # (below: mismatches only; a row as the event expects it lands at once)
    if target is None:
        old_version = _stamp(change.old)[1]
        if tombstone_version is None or tombstone_version < old_version:
            return Action(WAIT, f"{change.first_op} of a row the target does not have yet (version {old_version})")
        return Action(LOCK, f"{change.first_op} of a row that is not in the target")
    if target != change.old:
        have, expected = _stamp(target)[1], _stamp(change.old)[1]
        if have < expected:
            return Action(
                WAIT, f"{change.first_op}: the target row (version {have}) is behind the event's old row ({expected})"
            )
        diff = _diff(target, change.old)
        return Action(LOCK, f"{change.first_op}: target row differs from the event's old row in {diff}")
    return final


def _another_entitys_row(change: NetChange, target: dict, column: str) -> Action | None:
    """A resident table in copy mode (a migration's stock and stream meet at the target): a
    target row of another entity with this key is not an older version of this row, and a
    version-only upsert would overwrite it (S004-36, the seed's ODKU lesson). Locked."""
    first = change.first_event
    image = first.new if first.op == INSERT or first.old is None else first.old
    if image is None or target.get(column) == image.get(column):
        return None
    return Action(LOCK, f"the target's row with this key belongs to another entity ({column} "
                        f"{target.get(column)!r}, the change's {image.get(column)!r}): never overwritten")  # fmt: skip


def _by_version_only(change: NetChange, target: dict | None, tombstone_version: int | None) -> Action:
    """Copy mode: newer than the target row (or its tombstone) lands as the change's last
    state, whatever the target holds; anything else is skipped."""
    if target is not None:
        if int(target.get("_zs_version") or 0) >= change.version:
            return _NOT_NEWER
    elif tombstone_version is not None and tombstone_version >= change.version:
        return _DELETED
    return _PLAIN[UPSERT if change.new is not None else (DELETE_ROW if target is not None else TOMBSTONE)]


def _inside(change: NetChange, target: dict | None, tombstone_version: int | None) -> Action | None:
    """A merged change whose versions the target already partly has: the answer the events
    one by one would give, or None when the target stands before the change (S003-19).

    One by one, the events at or below the target's version (its row's, or its tombstone's
    when the row is gone) are skipped, and the rest is judged from the first event above
    it. The merged change starts earlier: judged from its first event it would lock a
    partial replay (its first old row is behind the target), bring back a row another
    zone deleted meanwhile (an insert chain across a newer tombstone), or skip an insert
    that meets another entity's row at exactly its version (S004-36)."""
    if target is not None:
        have = _stamp(target)
        for e in change.later:
            if e.op == INSERT and e.version == have[1] and _stamp(e.new) != have:
                return Action(
                    LOCK,
                    f"insert meets another row with this key: the target's (origin {have[0]}, version {have[1]}) is "
                    f"not the inserted row (origin {_stamp(e.new)[0]}, version {e.version})",
                )
        if change.first_event.op == INSERT:
            return None  # an insert meeting a row: its lineage is checked as a whole (below)
    mark = _stamp(target)[1] if target is not None else tombstone_version
    if mark is None or not change.first_event.version <= mark < change.version:
        return None
    rest = change.after(mark)
    return None if rest is None else decide(rest, target, tombstone_version, False)


def _insert_meets_row(change: NetChange, target: dict) -> Action:
    """An insert (possibly merged with later events) whose key the target already has: see
    "Inserts meeting a row" above."""
    origin, version = _stamp(target)
    image = _image_at(change, origin, version)
    if image is not None:  # 1. this row
        if version >= change.version:
            return _NOT_NEWER
        if target != image:
            diff = _diff(target, image)
            return Action(LOCK, f"insert: target row differs from this row's version {version} in {diff}")
        return _PLAIN[UPSERT if change.new is not None else DELETE_ROW]
    inserted_by, inserted_at = _stamp(change.first_event.new)
    if version > inserted_at and version >= change.version:  # 2. newer than all the change carries
        return _NOT_NEWER
    return Action(  # 3. another entity's row (or one the source never built on)
        LOCK,
        f"insert meets another row with this key: the target's (origin {origin}, version {version}) is not a "
        f"version of the inserted row (origin {inserted_by}, version {inserted_at}"
        + (f", last version {change.version})" if change.version != inserted_at else ")"),
    )


def _stamp(row: dict) -> tuple[int, int]:
    return int(row.get("_zs_origin") or 0), int(row.get("_zs_version") or 0)


def _image_at(change: NetChange, origin: int, version: int) -> dict | None:
    """The image of the change's row that carries this (origin, version), if any."""
    images = [change.first_event.new]
    for e in change.later or ():
        images += (e.old, e.new)
    for image in images:
        if image is not None and _stamp(image) == (origin, version):
            return image
    return None


def _diff(a: dict, b: dict | None) -> str:
    b = b or {}
    return ", ".join(sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))
