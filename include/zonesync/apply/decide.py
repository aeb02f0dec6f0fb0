"""What to do with one net change against the target row: a pure function.

Rules (seed 000 数据同步幂等 and 数据锁定, with the seed's inverted comparison
put the right way round):

- A version at or below what the target already has (the row's version, or
  the tombstone's when the row is gone) is a replay or is older: skip it. Never
  lock on it: the target being newer is not a mismatch (a zone can receive the
  new owner's write before the old owner's last ones).
- A change that starts with an insert needs no old-row check: it lands (as an
  upsert) when newer.
- A change that starts with an update or delete carries the old row: it lands
  only when the target row is exactly that old row. Otherwise the row was
  changed behind the applier's back, or a change was lost: lock it, skip it,
  and say why.
"""

from __future__ import annotations

from dataclasses import dataclass

from zonesync.apply.merge import NetChange
from zonesync.capture.event import INSERT

UPSERT, DELETE_ROW, TOMBSTONE, SKIP, LOCK = "upsert", "delete", "tombstone", "skip", "lock"


@dataclass(frozen=True)
class Action:
    kind: str
    reason: str = ""


# The reason-less outcomes, built once: decide() runs for every row of a batch.
_PLAIN = {kind: Action(kind) for kind in (UPSERT, DELETE_ROW, TOMBSTONE)}
_LOCKED = Action(SKIP, "row is locked: held until `zonesync locks resolve`")
_NOT_NEWER = Action(SKIP, "target already has this version or a newer one")
_DELETED = Action(SKIP, "row was deleted at this version or a newer one")


def decide(change: NetChange, target: dict | None, tombstone_version: int | None, locked: bool) -> Action:
    """`target` is the encoded target row (None when absent)."""
    if locked:
        return _LOCKED
    if target is not None and int(target.get("_zs_version") or 0) >= change.version:
        return _NOT_NEWER
    if target is None and tombstone_version is not None and tombstone_version >= change.version:
        return _DELETED
    final = _PLAIN[UPSERT if change.new is not None else (DELETE_ROW if target is not None else TOMBSTONE)]
    if change.first_op == INSERT:
        return final
    if target is None:
        return Action(LOCK, f"{change.first_op} of a row that is not in the target")
    if target != change.old:
        diff = sorted(k for k in set(target) | set(change.old or {}) if target.get(k) != (change.old or {}).get(k))
        return Action(LOCK, f"{change.first_op}: target row differs from the event's old row in {', '.join(diff)}")
    return final
