"""LSN continuity per (source zone, partition): a pure state machine.

For every partition the applier knows the last applied LSN L. An arriving event e:

- e.lsn <= L: a duplicate, a replay or a resend of something applied: skip it
  (seed: "只需要判断 lsn 和上一个是否相等", extended to any LSN at or below L).
- e.prev_lsn == L: the successor: accept it, L becomes e.lsn.
- otherwise: something between L and e is missing or out of order. Accept
  nothing more from this partition until an event with prev_lsn == L arrives
  (the resend), and say so, so the caller can ask for it.

is_retry does not relax any of this (the seed lets retries skip the check,
which would hide a loss inside a resent range).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zonesync.events import ChangeEvent


@dataclass
class PartitionState:
    applied_lsn: int
    gap_since: float | None = None  # monotonic time the gap was first seen
    resend_attempts: int = 0
    last_request: float = 0.0
    request_id: int | None = None
    requested_at: float = 0.0  # monotonic time the open resend request was made
    retry_seen: float = -1.0  # monotonic time resent events (is_retry) last arrived
    halted: bool = False


@dataclass
class Filtered:
    accepted: list[tuple[ChangeEvent, int]] = field(default_factory=list)  # (event, kafka offset)
    skipped: int = 0
    gap: tuple[int, int] | None = None  # (expected prev_lsn, the prev_lsn that arrived)


def filter_chain(applied_lsn: int, events: list[tuple[ChangeEvent, int]]) -> Filtered:
    out = Filtered()
    last = applied_lsn
    for event, offset in events:
        if event.lsn <= last:
            out.skipped += 1
        elif event.prev_lsn == last:
            out.accepted.append((event, offset))
            last = event.lsn
        else:
            if out.gap is None:
                out.gap = (last, event.prev_lsn)
            out.skipped += 1
    return out


def complete_prefix(chain: list[tuple[ChangeEvent, int]]) -> tuple[list, list]:
    """Split a partition's accepted chain after the last event that ends its transaction
    in this partition (seed S002-02, 事务完整性): (what may be applied, what waits for the
    rest of its transaction). An event ends it when it carries txn_end, or when the next
    event in the chain belongs to another transaction."""
    for i in range(len(chain) - 1, -1, -1):
        event = chain[i][0]
        if event.txn_end or (i + 1 < len(chain) and chain[i + 1][0].txn_id != event.txn_id):
            return (chain, []) if i == len(chain) - 1 else (chain[: i + 1], chain[i + 1 :])
    return [], chain
