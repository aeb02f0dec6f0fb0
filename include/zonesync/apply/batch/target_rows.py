"""Reading what the target holds for a batch's keys: the read of "read, decide, write".

The target rows are read FOR UPDATE, so nothing changes them between the
decision and the write. Their tombstones and locks are looked up after that
read, never before: a local delete that committed while we waited for a row's
lock has written its tombstone (dal/transaction.py, in the same transaction),
and the lookup sees it. Nothing is cached between batches: another process may
write a tombstone at any moment.
"""

from __future__ import annotations

import pymysql

from zonesync.apply.batch import new_rows
from zonesync.apply.batch.statements import key_condition, q, result_sets
from zonesync.events import encode_row, pk_text

# MySQL: table doesn't exist (a zone whose bookkeeping predates zonesync.copy_tables)
NO_SUCH_TABLE = 1146


def read(cur, lit, table, pk_cols, keys, texts, first: list[str], loaded: int = 0):
    """The target rows (locked FOR UPDATE), their tombstones' versions, the held
    counts of locked rows, by pk text, and whether the table has any tombstone or
    locked row. `first` (the new rows' INSERT, or a LOAD DATA of `loaded` rows) runs
    ahead of it all, in the same request.

    The first request reads the target rows and asks whether the table has any
    tombstone or locked row at all; only when it does, a second request looks the
    batch's keys up (an IN list of pk texts costs the server about 3 µs per key, a
    third of what the whole apply costs it, and most tables hold no locked rows and
    no recent deletes). Both requests run after the FOR UPDATE read, as the single
    lookup did, so the probe or the lookup after it sees a tombstone committed while
    we waited.
    """
    reads: list[str] = list(first)
    for start in range(0, len(keys), 500):
        cond = key_condition(lit, pk_cols, keys[start : start + 500])
        # FORCE INDEX: on a small table the optimizer prefers a full scan, and FOR UPDATE
        # then waits for (and, under READ COMMITTED, keeps until commit) rows it never
        # matches: the zone's own writers on other keys deadlock with the applier.
        reads.append(f"SELECT * FROM {q(table)} FORCE INDEX (PRIMARY) WHERE {cond} FOR UPDATE")
    name = lit(table)
    reads.append(
        f"SELECT EXISTS (SELECT 1 FROM zonesync.tombstones WHERE table_name = {name}), "
        f"EXISTS (SELECT 1 FROM zonesync.row_locks WHERE table_name = {name})"
    )
    targets: dict[str, dict] = {}
    sets = result_sets(cur, reads)
    for _ in first:
        next(sets)
    if loaded:  # a LOAD DATA is all of `first`
        new_rows.check_loaded(cur, loaded, table)
    for _ in range(len(reads) - len(first) - 1):
        rows = next(sets)
        names = [d[0] for d in cur.description]
        for row in rows:
            record = encode_row(dict(zip(names, row, strict=True)))
            targets[pk_text({c: record[c] for c in pk_cols})] = record
    ((any_tombstone, any_lock),) = next(sets)
    tombstones: dict[str, int] = {}
    locks: dict[str, int] = {}
    marked = bool(any_tombstone or any_lock)
    if not marked or not keys:
        return targets, tombstones, locks, marked
    lookups: list[str] = []
    for start in range(0, len(texts), 500):
        marks = ", ".join([lit(t) for t in texts[start : start + 500]])
        parts = []
        if any_tombstone:
            parts.append(
                f"SELECT 't', pk, version FROM zonesync.tombstones WHERE table_name = {name} AND pk IN ({marks})"
            )
        if any_lock:
            parts.append(
                f"SELECT 'l', pk, held_events FROM zonesync.row_locks WHERE table_name = {name} AND pk IN ({marks})"
            )
        lookups.append(" UNION ALL ".join(parts))
    for rows in result_sets(cur, lookups):
        for kind, pk, value in rows:
            (tombstones if kind == "t" else locks)[pk] = int(value)
    return targets, tombstones, locks, marked


def copy_tables(conn) -> frozenset[str]:
    """The tables an online full copy is filling in this zone (zonesync.copy_tables, read
    and committed: a fresh look each time); none in a zone whose bookkeeping predates
    the table."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM zonesync.copy_tables")
            rows = cur.fetchall()
    except pymysql.err.ProgrammingError as exc:
        if exc.args[0] != NO_SUCH_TABLE:
            raise
        rows = ()
    conn.commit()
    return frozenset(name for (name,) in rows)


def other_unique_keys(cur, table: str) -> bool:
    """Whether the table (in the connection's database) has a unique key besides its
    primary key: copy mode then INSERTs the rows the target lacks (write_plan.py)."""
    cur.execute(
        "SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
        "AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY' LIMIT 1",
        (table,),
    )
    return bool(cur.fetchall())
