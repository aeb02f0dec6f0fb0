"""What one applied batch amounts to: the counts the applier reports and the locks it alerts.

Its own module because every path of the writer fills one (the read-first apply,
the new-rows INSERT, the serial retry of unique-key conflicts), and a conflict
that stops partitions carries the part that did commit (unique_keys.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchResult:
    applied: int = 0
    skipped: int = 0
    locked: list[tuple[str, str, str, str]] = field(default_factory=list)  # (source, table, pk, reason)
    new_rows: int = 0  # of the applied: rows written as new, without reading the target first
