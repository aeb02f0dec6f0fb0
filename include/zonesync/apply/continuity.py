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

from zonesync.capture.event import ChangeEvent


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
