"""A table's key-range chunks: planned once, kept in the target, done with their rows.

Planning walks the source's primary-key index in steps of `chunk_rows` (the way
pt-table-checksum nibbles): each boundary is the key `chunk_rows` rows after the
last one, read from the index alone, so planning a 10M-row table reads 10M index
entries once and no row. The chunks cover the whole key space, (-inf, b1], (b1,
b2], …, (bn, +inf): a row inserted anywhere later still falls in exactly one, and a
chunk's rows are read `WHERE key > lo AND key <= hi` (seed S000-77: keyed, never an
OFFSET over the rows, so deletes behind the copy shift nothing).

A large table keyed by one integer column whose keys are dense (their span at most
twice the rows InnoDB estimates) is planned by arithmetic instead: bounds every
`chunk_rows` keys from its first key. Keys are unique, so such a chunk holds at most
`chunk_rows` rows (fewer where keys are missing), and the walk's CPU (a scan of the
clustered index: 1.4 s of a zone's CPU for 10M rows) is saved; with sparse keys, or a
table too small for the walk to matter, or no estimate yet, the walk it is.

The plan is written to the target's zonesync.copy_chunks chunk by chunk as it is found,
while the first chunks are already copied (a re-run reads it back, and goes on planning
after its last chunk if it ends before +inf); a chunk becomes 'done' in the same
transaction as the rows it landed.
"""

from __future__ import annotations

import json

from zonesync.apply.batch.statements import q  # names quoted, and checked, as the applier does
from zonesync.copy.request import CopyRefused

INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")


def key_columns(conn, schema: str, table: str) -> list[tuple[str, str]]:
    """(column, data type) of the table's primary key, in key order."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT k.COLUMN_NAME, c.DATA_TYPE FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND c.TABLE_NAME = k.TABLE_NAME "
            "AND c.COLUMN_NAME = k.COLUMN_NAME WHERE k.TABLE_SCHEMA = %s AND k.TABLE_NAME = %s "
            "AND k.CONSTRAINT_NAME = 'PRIMARY' ORDER BY k.ORDINAL_POSITION",
            (schema, table),
        )
        rows = cur.fetchall()
    conn.commit()
    return [(c, t.lower()) for c, t in rows]


def check_copyable(conn, schema: str, table: str, zone: str, entity_column: str | None = None) -> list[str]:
    """The table's key columns; CopyRefused when the copy cannot keep its promises for it.

    Unique keys besides the primary key are refused, except in a migration's stock copy
    (`entity_column`: its rows are one entity's) when every such key holds the entity
    column: a copied row can then meet, through one, only a row of its own entity, one the
    stream is moving away from the value (the copy's statements leave the row for the
    stream, merge.upsert_statement)."""
    key = key_columns(conn, schema, table)
    if not key:
        raise CopyRefused(f"tables: {table} is missing in zone {zone} or has no primary key; create it there first")
    odd = [f"{c} ({t})" for c, t in key if t not in INTEGER_TYPES]
    if odd:
        raise CopyRefused(
            f"tables: {table}'s primary key has non-integer columns {', '.join(odd)}; full copy keys tombstones by "
            "integer keys only (docs/copy.md)"
        )
    unique = unique_keys(conn, schema, table)
    if unique and entity_column is None:
        raise CopyRefused(
            f"tables: {table} has unique keys besides its primary key ({', '.join(unique)}); a version-guarded "
            "upsert could meet another row through them, so full copy does not take such tables yet (docs/copy.md)"
        )
    foreign = [name for name, cols in unique.items() if entity_column not in cols]
    if foreign:
        raise CopyRefused(
            f"tables: {table} has unique keys without its entity column {entity_column} ({', '.join(foreign)}); "
            "a moving entity's row could meet another entity's row through them: add the column to the key "
            "(docs/migration.md)"
        )
    return [c for c, _ in key]


def unique_keys(conn, schema: str, table: str) -> dict[str, list[str]]:
    """{index: its columns in order} of the table's unique keys besides the primary key."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY' ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        rows = cur.fetchall()
    conn.commit()
    out: dict[str, list[str]] = {}
    for name, column in rows:
        out.setdefault(name, []).append(column)
    return out


def row_key(cols: list[str], alias: str = "") -> str:
    names = [f"{alias}.{q(c)}" if alias else q(c) for c in cols]
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def literal(values: list[int]) -> str:
    ints = [str(int(v)) for v in values]
    return ints[0] if len(ints) == 1 else "(" + ", ".join(ints) + ")"


def predicate(cols: list[str], lo: list[int] | None, hi: list[int] | None, alias: str = "") -> str:
    """The WHERE condition of one chunk (pure); `alias` qualifies the key's columns."""
    parts = []
    if lo is not None:
        parts.append(f"{row_key(cols, alias)} > {literal(lo)}")
    if hi is not None:
        parts.append(f"{row_key(cols, alias)} <= {literal(hi)}")
    return " AND ".join(parts) or "1 = 1"


DENSE_MIN_ROWS = 1_000_000  # below this, the walk costs less than a second's tenth


def dense_keys(conn, table: str, col: str) -> tuple[int, int] | None:
    """(first key, last key) of a table of at least DENSE_MIN_ROWS estimated rows whose
    integer keys span at most twice that many values; None otherwise (see above)."""
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = %s", (table,))  # fmt: skip
        row = cur.fetchone()
        estimate = int(row[0] or 0) if row else 0
        span = None
        if estimate >= DENSE_MIN_ROWS:
            cur.execute(f"SELECT MIN({q(col)}), MAX({q(col)}) FROM {q(table)}")  # the index's two ends
            span = cur.fetchone()
    conn.commit()
    if span is None or span[0] is None or int(span[1]) - int(span[0]) + 1 > 2 * estimate:
        return None
    return int(span[0]), int(span[1])


def bounds_after(conn, table: str, cols: list[str], chunk_rows: int, after: list[int] | None,
                 where: str | None = None):  # fmt: skip
    """Each next chunk boundary after the key `after` (None: from the first key), one
    index step of `chunk_rows` keys each (or, dense keys, every `chunk_rows` values: see
    above), as they are found (a generator). `where` (a migration's stock copy, or its
    verify: one entity's rows): steps of `chunk_rows` of the rows it selects, walked
    through the index the server picks for it (the entity column's), so planning reads
    the entity's keys, not the table's."""
    dense = dense_keys(conn, table, cols[0]) if len(cols) == 1 and where is None else None
    if dense is not None:
        first, last = dense
        bound = (int(after[0]) if after is not None else first - 1) + chunk_rows
        while bound < last:
            yield [bound]
            bound += chunk_rows
        return
    key_list = ", ".join(q(c) for c in cols)
    last = after
    source = f"{q(table)} FORCE INDEX (PRIMARY)" if where is None else q(table)
    while True:
        conds = [f"({where})"] if where is not None else []
        if last is not None:
            conds.append(f"{row_key(cols)} > {literal(last)}")
        clause = f"WHERE {' AND '.join(conds)} " if conds else ""
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT {key_list} FROM {source} {clause}ORDER BY {key_list} LIMIT 1 OFFSET {int(chunk_rows) - 1}"
            )
            row = cur.fetchone()
        conn.commit()
        if row is None:
            return
        last = [int(v) for v in row]
        yield last


def plan(conn, table: str, cols: list[str], chunk_rows: int) -> list[tuple[list[int] | None, list[int] | None]]:
    """Chunk bounds (lo, hi) over the source's current keys (see above), all at once."""
    edges: list[list[int] | None] = [None, *bounds_after(conn, table, cols, chunk_rows, None), None]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def complete(stored: list[dict]) -> bool:
    """Whether a stored plan is whole: its last chunk reaches +inf."""
    return bool(stored) and stored[-1]["hi"] is None


def plan_after(source_conn, table: str, cols: list[str], chunk_rows: int, stored: list[dict], write,
               where: str | None = None):  # fmt: skip
    """The chunks after those `stored` (none: from the start) as (n, lo, hi), each stored
    by `write(n, lo, hi)` (which returns the upper bound chunk n has once stored) before
    it is yielded; the last chunk reaches +inf and completes the plan.

    Two planners may run on one run at once (a task killed while its Spark job lives on,
    and the retry's job): the first to store chunk n wins, and a planner that finds n
    stored already adopts its bounds and plans on from its upper one, so every job works
    through the stored chunks and the plan never has a gap or an overlap."""
    n, lo = len(stored), (stored[-1]["hi"] if stored else None)
    while True:
        for bound in _then_none(bounds_after(source_conn, table, cols, chunk_rows, lo, where)):
            hi = write(n, lo, bound)
            yield n, lo, hi
            n, lo = n + 1, hi
            if hi is None:
                return
            if hi != bound:  # another planner's chunk: plan on from its bound
                break


def extend_plan(target_conn, source_conn, run_id: str, table: str, cols: list[str], chunk_rows: int,
                stored: list[dict], found=None, where: str | None = None) -> None:  # fmt: skip
    """Plan the copy's chunks after those `stored` (plan_after), each written to the
    target's copy_chunks as soon as it is found and handed to `found(chunk)`: the row
    copy starts on the first chunks while the rest are planned, and a planner killed
    mid-way goes on from the last chunk written."""
    write = lambda n, lo, hi: _write_chunk(target_conn, run_id, table, n, lo, hi)  # noqa: E731
    for n, lo, hi in plan_after(source_conn, table, cols, chunk_rows, stored, write, where):
        if found is not None:
            found({"table": table, "chunk": n, "lo": lo, "hi": hi, "status": "pending", "rows_read": 0,
                   "rows_landed": 0, "done_at": None})  # fmt: skip


def _then_none(bounds):
    yield from bounds
    yield None


def _write_chunk(conn, run_id: str, table: str, n: int, lo, hi):
    """Store chunk n as (lo, hi) unless it is stored already; the upper bound it has."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT IGNORE INTO zonesync.copy_chunks (run_id, table_name, chunk_no, lo, hi) "
            "VALUES (%s, %s, %s, %s, %s)",
            (run_id, table, n, None if lo is None else json.dumps(lo), None if hi is None else json.dumps(hi)),
        )
        if cur.rowcount == 0:
            cur.execute(
                "SELECT hi FROM zonesync.copy_chunks WHERE run_id = %s AND table_name = %s AND chunk_no = %s",
                (run_id, table, n),
            )
            (stored,) = cur.fetchone()
            hi = None if stored is None else json.loads(stored)
    conn.commit()
    return hi


def read(conn, run_id: str, table: str | None = None) -> list[dict]:
    where, args = "run_id = %s", [run_id]
    if table is not None:
        where, args = where + " AND table_name = %s", [*args, table]
    with conn.cursor() as cur:
        cur.execute(
            "SELECT table_name, chunk_no, lo, hi, status, rows_read, rows_landed, done_at FROM zonesync.copy_chunks "
            f"WHERE {where} ORDER BY table_name, chunk_no",
            args,
        )
        rows = cur.fetchall()
    conn.commit()
    return [
        {"table": t, "chunk": int(n), "lo": None if lo is None else json.loads(lo),
         "hi": None if hi is None else json.loads(hi), "status": st, "rows_read": int(rr), "rows_landed": int(rl),
         "done_at": done}
        for t, n, lo, hi, st, rr, rl, done in rows
    ]  # fmt: skip


PAUSE_S = 30.0  # a longer wait between two chunk commits (a stop, a kill, a throttle) ends a stretch


def summarize(tables, rows: list[dict]) -> dict:
    """progress() from the chunk rows (pure). The rate is the rows committed after the
    first chunk commit of the latest stretch of work, over the time from it to the last:
    a pause of over PAUSE_S between two commits (the copy killed and resumed, or held by
    the throttle) starts a new stretch, so a resumed copy's rate and ETA are its own
    pace, not an average over the time it was down. The ETA assumes the chunks left
    hold as many rows each."""
    empty = {"chunks": 0, "done": 0, "rows": 0, "first": None, "last": None}
    out: dict[str, dict] = {t: dict(empty) for t in tables}
    done: dict[str, list[tuple]] = {}
    for c in rows:
        t = out.setdefault(c["table"], dict(empty))
        t["chunks"] += 1
        if c["status"] == "done":
            t["done"] += 1
            t["rows"] += c["rows_read"]
            if c["done_at"] is not None:
                done.setdefault(c["table"], []).append((c["done_at"], c["rows_read"]))
    for name, t in out.items():
        stretch = _latest_stretch(sorted(done.get(name, ())))
        if stretch:
            t["first"], t["last"] = stretch[0][0], stretch[-1][0]
        span = (t["last"] - t["first"]).total_seconds() if stretch else 0.0
        # the rows committed after the stretch's first commit, over the time since it
        t["rate"] = sum(n for at, n in stretch if at > stretch[0][0]) / span if span > 0 else None
        left = t["chunks"] - t["done"]
        per_chunk = t["rows"] / t["done"] if t["done"] else None
        t["eta_s"] = left * per_chunk / t["rate"] if left and t["rate"] and per_chunk is not None else None
    return out


def combined(tables: dict) -> dict | None:
    """summarize()'s per-table entries as one (pure)."""
    if not tables or not any(t["chunks"] for t in tables.values()):
        return None
    etas = [t["eta_s"] for t in tables.values() if t["eta_s"]]
    rates = [t["rate"] for t in tables.values() if t["rate"]]
    return {"unit": "chunks", "done": sum(t["done"] for t in tables.values()),
            "total": sum(t["chunks"] for t in tables.values()), "rows": sum(t["rows"] for t in tables.values()),
            "rate_rows_s": sum(rates) if rates else None, "eta_s": max(etas) if etas else None}  # fmt: skip


def _latest_stretch(commits: list[tuple]) -> list[tuple]:
    """The (done_at, rows) commits after the last pause of over PAUSE_S (in time order)."""
    start = 0
    for i in range(1, len(commits)):
        if (commits[i][0] - commits[i - 1][0]).total_seconds() > PAUSE_S:
            start = i
    return commits[start:]


def progress_text(p: dict) -> str:
    """One table's summarize() entry as the CLI and the job's log show it."""
    rate = f", {p['rate']:,.0f} rows/s" if p["rate"] else ""
    eta = f", about {p['eta_s']:,.0f} s left" if p["eta_s"] else ""
    return f"{p['done']}/{p['chunks']} chunks, {p['rows']:,} rows{rate}{eta}"
