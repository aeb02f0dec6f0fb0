"""Landing a chunk in the target: the applier's version rule, as statements the target
runs itself.

Each Spark task of the row copy reads one key-range chunk from the source and lands it
straight in the target's table in one transaction (spark_jobs/jvm/…/ChunkCopier,
which runs the statements built here):

1. locks the chunk's row in copy_chunks; a chunk already done is not landed again
   (a re-run after a kill);
2. locks the chunk's key range in the target (range_statement: its rows and the gaps
   between them, REPEATABLE READ), learning which copied keys the target holds;
3. inserts the rows whose keys the target lacks in batches of plain INSERTs (nothing
   can appear in the locked range meanwhile), and upserts the others: INSERT … ON
   DUPLICATE KEY UPDATE every column only if the copied version is newer (S000-71..75:
   the newest version wins, whichever path came first); _zs_version is assigned last,
   as MySQL assigns left to right. A batch of upserts runs at half the speed of a batch
   of INSERTs, and a copy into an emptied zone finds almost every key missing;
4. if the table has any tombstone, deletes the chunk's rows that a tombstone at or above
   their version outranks (S000-76: a delete the stream applied first keeps the row
   away). Versions only grow and a re-insert outranks its tombstone, so a live row at or
   below its tombstone is stale, whoever wrote it;
5. marks the chunk done with its counts.

The transaction runs in REPEATABLE READ. The tombstone probe of step 4 is a consistent
read taken after the upsert's row locks: an applier's delete of a copied key either
committed its tombstone before the probe (seen, and the cleanup's locking read deletes
the row) or has to wait for this transaction's lock on the row and deletes it after
(in copy mode the applier writes the tombstone before its version-guarded delete). The
session sets skip_replication, as the applier's does: the target's replicator never
publishes copied rows (S001-13).

Before session 14 the rows were staged in a table of the target and merged with
INSERT … SELECT: every row was written twice, and the row copy ran at 0.15x of
`mariadb-dump | mariadb` (docs/benchmarks.md). The staging tables that remain are the
prune step's candidates (stage_name + prune.orphans_name).
"""

from __future__ import annotations

import hashlib

from zonesync.copy.chunks import predicate, q

STAGE_DB = "zonesync"
VERSION = "_zs_version"


def stage_name(run_id: str, table: str) -> str:
    """The prefix of one run and table's staging tables: a short stable name."""
    digest = hashlib.sha1(f"{run_id}\0{table}".encode()).hexdigest()[:12]
    return f"copy_stage_{digest}"


def landing_columns(columns: list[str]) -> list[str]:
    """The table's columns in the order the upsert binds them: _zs_version last."""
    return [c for c in columns if c != VERSION] + [VERSION]


def pk_text_sql(alias: str, key_cols: list[str]) -> str:
    """SQL for events.pk_text of an integer key: "[v]" or "[v1,v2]" in column-name order."""
    parts = ", ',', ".join(f"{alias}.{q(c)}" for c in sorted(key_cols))
    return f"CONCAT('[', {parts}, ']')"


def key_positions(columns: list[str], key_cols: list[str]) -> list[int]:
    """Where each key column is in a landed row (landing_columns order)."""
    cols = landing_columns(columns)
    return [cols.index(k) for k in key_cols]


def select_statement(app_db: str, table: str, columns: list[str], key_cols: list[str], lo, hi,
                     where: str | None = None) -> str:  # fmt: skip
    """The source's rows of one chunk, columns in landing_columns order, only those `where`
    selects when given (a migration's stock copy: its entities' rows) (pure)."""
    cols = ", ".join(q(c) for c in landing_columns(columns))
    extra = f" AND {where}" if where else ""
    return f"SELECT {cols} FROM {q(app_db)}.{q(table)} WHERE {predicate(key_cols, lo, hi)}{extra}"


def range_statement(app_db: str, table: str, key_cols: list[str], lo, hi, where: str | None = None) -> str:
    """Lock a chunk's key range in the target and read the keys it holds (pure); `where`
    (a stock copy): only the rows it selects, and the gaps between them, in its index."""
    keys = ", ".join(q(k) for k in key_cols)
    extra = f" AND {where}" if where else ""
    return f"SELECT {keys} FROM {q(app_db)}.{q(table)} WHERE {predicate(key_cols, lo, hi)}{extra} FOR UPDATE"


def insert_statement(app_db: str, table: str, columns: list[str]) -> str:
    """The plain INSERT of one copied row whose key the target lacks, its columns as
    parameters in landing_columns order (pure)."""
    cols = landing_columns(columns)
    return (
        f"INSERT INTO {q(app_db)}.{q(table)} ({', '.join(q(c) for c in cols)}) VALUES ({', '.join('?' for _ in cols)})"
    )


def upsert_statement(app_db: str, table: str, columns: list[str], entity_column: str | None = None,
                     key_cols: list[str] | None = None) -> str:  # fmt: skip
    """The version-guarded upsert of one copied row whose key the target holds (pure).
    With `entity_column` (a migration's stock copy of a resident table), a target row of
    another entity is never overwritten, whatever its version (S004-36: the copied row is
    then missing at the target, and the migration's verify names it).

    With `key_cols` (a stock copy of a table with other unique keys, each holding the
    entity column: chunks.check_copyable), every row lands through this statement, and a
    row the copied one meets is changed only if it is the same row (same key): through a
    unique key it can meet only a row of its own entity that still holds a value the
    source has moved on from, and the stream, applying the source's changes in order,
    moves that row off the value before it brings this one's. IGNORE: an update that
    would itself meet a third row through a unique key is left (MariaDB warns, 1062) the
    same way, for the stream; a row left stays missing or older only until then, and the
    final check counts and checksums the rows after the stream caught up."""
    cols = landing_columns(columns)
    same = f" AND {q(entity_column)} <=> VALUES({q(entity_column)})" if entity_column else ""
    same += "".join(f" AND {q(k)} <=> VALUES({q(k)})" for k in key_cols or ())
    newer = f"VALUES({q(VERSION)}) > {q(VERSION)}{same}"
    sets = [f"{q(c)} = IF({newer}, VALUES({q(c)}), {q(c)})" for c in cols[:-1]]
    version = f"GREATEST({q(VERSION)}, VALUES({q(VERSION)}))"
    sets.append(f"{q(VERSION)} = " + (f"IF(TRUE{same}, {version}, {q(VERSION)})" if same else version))
    insert = insert_statement(app_db, table, columns)
    if key_cols:
        insert = insert.replace("INSERT INTO", "INSERT IGNORE INTO", 1)
    return f"{insert} ON DUPLICATE KEY UPDATE {', '.join(sets)}"


def cleanup_statement(app_db: str, table: str, key_cols: list[str], lo, hi, where: str | None = None) -> str:
    """Delete the chunk's rows a tombstone at or above their version outranks (pure);
    `where` (a stock copy): only among the rows it selects."""
    name = table.replace("'", "''")
    extra = f" AND {where}" if where else ""
    return (
        f"DELETE t FROM {q(app_db)}.{q(table)} t JOIN zonesync.tombstones tb ON tb.table_name = '{name}' "
        f"AND tb.pk = {pk_text_sql('t', key_cols)} WHERE {predicate(key_cols, lo, hi, alias='t')} "
        f"AND tb.version >= t.{q(VERSION)}{extra}"
    )


LOCK_CHUNK = "SELECT status FROM zonesync.copy_chunks WHERE run_id = ? AND table_name = ? AND chunk_no = ? FOR UPDATE"
ANY_TOMBSTONE = "SELECT 1 FROM zonesync.tombstones WHERE table_name = ? LIMIT 1"
MARK_DONE = (
    "UPDATE zonesync.copy_chunks SET status = 'done', rows_read = ?, rows_landed = ?, done_at = NOW(6) "
    "WHERE run_id = ? AND table_name = ? AND chunk_no = ?"
)


def drop_stage(conn, stage: str) -> None:
    """Drop the staging tables of a run and table (the prune step's candidates)."""
    pattern = stage.replace("_", "\\_") + "%"
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME LIKE %s",
            (STAGE_DB, pattern),
        )
        for (name,) in cur.fetchall():
            cur.execute(f"DROP TABLE IF EXISTS {q(STAGE_DB)}.{q(name)}")
    conn.commit()
