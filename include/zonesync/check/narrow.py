"""A differing chunk narrowed before its rows are read (the consistency check's step 4).

A chunk's checksum says only that some row of its 100k differs. Reading the whole chunk
from every zone to find the few that do costs a hundred thousand rows per zone per
difference (100 scattered differences in 10M rows read about 9M rows from each zone).
So, as sync-diff-inspector bisects a chunk by checksums, each zone first computes the
chunk's checksum per key sub-range in one GROUP BY query (pushed down like the chunk's
own), and only the sub-ranges whose numbers differ between zones are read row by row:
1/SPLIT of the chunk per difference.

The sub-ranges split the chunk's key span [first, last] (its bounds, or the zones'
MIN/MAX where a chunk is open-ended) in SPLIT equal steps. Only a one-column key is split
(`splittable`); a chunk of a composite key is read whole, as before. Every function here
is pure: the SQL, and the choice of sub-ranges from the numbers.
"""

from __future__ import annotations

from zonesync.check import sql as check_sql
from zonesync.copy.chunks import predicate, q

SPLIT = 64  # sub-ranges per chunk: a 100k-row chunk's differences read ~1.6k rows each


def splittable(key: list[str]) -> bool:
    return len(key) == 1


def span_query(table: str, key: list[str], lo, hi, where: str | None = None) -> str:
    """The zone's smallest and largest first-key value in the chunk (an open-ended one)."""
    first = q(key[0])
    return (f"SELECT MIN({first}), MAX({first}) FROM {q(table)} WHERE {predicate(key, lo, hi)}"
            f"{f' AND {where}' if where else ''}")  # fmt: skip


def known_span(key: list[str], lo, hi) -> tuple[int, int] | None:
    """The chunk's key span from its bounds alone, when both are set (lo is exclusive, hi
    inclusive); None: ask the zones."""
    if lo is None or hi is None:
        return None
    return int(lo[0]) + 1, int(hi[0])


def merged_span(spans: list[tuple[str | None, str | None]]) -> tuple[int, int] | None:
    """The span covering every zone's (MIN, MAX) answer; None when no zone has a row."""
    found = [(int(a), int(b)) for a, b in spans if a not in (None, "", "\\N") and b not in (None, "", "\\N")]
    if not found:
        return None
    return min(a for a, _ in found), max(b for _, b in found)


def step_of(first: int, last: int, split: int = SPLIT) -> int:
    return max(1, -(-(last - first + 1) // split))


def bucket_query(table: str, columns, key: list[str], lo, hi, first: int, step: int,
                 nullable: set[str] | None = None, where: str | None = None) -> str:  # fmt: skip
    """Per sub-range of the chunk, its row count and BIT_XOR of row CRCs (the chunk
    checksum's own numbers), one row per sub-range holding rows."""
    k = q(key[0])
    return (f"SELECT ({k} - {int(first)}) DIV {int(step)}, COUNT(*), "
            f"COALESCE(BIT_XOR({check_sql.row_hash(columns, nullable)}), 0) FROM {q(table)} "
            f"WHERE {predicate(key, lo, hi)}{f' AND {where}' if where else ''} GROUP BY 1")  # fmt: skip


def differing(buckets: dict[str, list[list[str]]]) -> list[int]:
    """The sub-ranges whose (count, checksum) is not the same in every zone (a zone
    without a row there counts as none), in order. `buckets`: zone -> rows of
    bucket_query's result."""
    seen: dict[str, dict[int, tuple[str, str]]] = {}
    for zone, rows in buckets.items():
        seen[zone] = {int(r[0]): (r[1], r[2]) for r in rows if len(r) == 3}
    every = sorted({b for got in seen.values() for b in got})
    return [b for b in every if len({got.get(b, ("0", "0")) for got in seen.values()}) > 1]


def sub_chunks(chunk: dict, key: list[str], first: int, last: int, step: int, which: list[int]) -> list[dict]:
    """The chunk's differing sub-ranges as chunks of their own (the parent's number and
    fields; lo exclusive, hi inclusive, as the plan's), kept within the chunk's bounds."""
    out = []
    for b in which:
        a, z = first + b * step, min(last, first + (b + 1) * step - 1)
        lo, hi = [a - 1], [z]
        if chunk["lo"] is not None and lo[0] < int(chunk["lo"][0]):
            lo = chunk["lo"]
        if chunk["hi"] is not None and hi[0] > int(chunk["hi"][0]):
            hi = chunk["hi"]
        out.append({**chunk, "lo": lo, "hi": hi})
    return out
