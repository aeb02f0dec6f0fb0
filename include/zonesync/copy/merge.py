"""Landing a chunk in the target: the applier's version rule, as one statement the
target runs itself.

The Spark job appends a wave's chunks to a staging table of their own in the target's
`zonesync` database (no keys but the chunk number's, so rows read at different moments
never clash), then one transaction per chunk:

1. locks the chunk's row in copy_chunks; a chunk already done is not merged again
   (a re-run after a kill);
2. INSERT … SELECT from staging, each row only if no tombstone of its key is at or
   above its version (S000-76: a delete the stream applied first keeps the row
   away), and ON DUPLICATE KEY UPDATE every column only if the staged version is
   newer (S000-71..75: the newest version wins, whichever path came first);
   _zs_version is assigned last, as MySQL assigns left to right;
3. marks the chunk done with its counts.

Once every chunk of the wave is merged its staging table is dropped (cheaper than
deleting its rows); a killed attempt's staging tables are dropped when the job starts
again, and its chunks that did not commit are read again into new ones.

The transaction runs in REPEATABLE READ: the tombstone lookup inside INSERT …
SELECT is then a locking read, so an applier's delete either committed its
tombstone before (seen, the row stays away) or waits for this transaction and
deletes the merged row after it (the applier writes the tombstone before its
version-guarded delete in copy mode). The session sets skip_replication, as the
applier's does: the target's replicator never publishes copied rows (S001-13).
"""

from __future__ import annotations

import hashlib

from zonesync.copy.chunks import q

STAGE_DB = "zonesync"
CHUNK_COL = "_zs_chunk"


def stage_name(run_id: str, table: str) -> str:
    """The prefix of one run and table's staging tables: a short stable name."""
    digest = hashlib.sha1(f"{run_id}\0{table}".encode()).hexdigest()[:12]
    return f"copy_stage_{digest}"


def wave_stage(stage: str, first_chunk: int) -> str:
    """The staging table of the wave that starts at chunk `first_chunk`."""
    return f"{stage}_w{int(first_chunk)}"


def create_stage(app_db: str, table: str, stage: str) -> list[str]:
    """Staging: the table's columns, no key but the chunk number's (idempotent). MyISAM:
    staged rows are disposable (a killed wave is read again), and skipping InnoDB's
    undo and redo for them made the row copy 25 % faster (make bench copy)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {q(STAGE_DB)}.{q(stage)} ENGINE=MyISAM AS "
        f"SELECT * FROM {q(app_db)}.{q(table)} WHERE 1 = 0",
        f"ALTER TABLE {q(STAGE_DB)}.{q(stage)} ADD COLUMN IF NOT EXISTS {q(CHUNK_COL)} INT NOT NULL DEFAULT 0, "
        f"ADD KEY IF NOT EXISTS idx_chunk ({q(CHUNK_COL)})",
    ]


def pk_text_sql(alias: str, key_cols: list[str]) -> str:
    """SQL for events.pk_text of an integer key: "[v]" or "[v1,v2]" in column-name order."""
    parts = ", ',', ".join(f"{alias}.{q(c)}" for c in sorted(key_cols))
    return f"CONCAT('[', {parts}, ']')"


def merge_statement(app_db: str, table: str, stage: str, columns: list[str], key_cols: list[str], chunk: int) -> str:
    """The version- and tombstone-guarded merge of one staged chunk (pure)."""
    cols = [c for c in columns if c not in ("_zs_version", CHUNK_COL)] + ["_zs_version"]
    col_sql = ", ".join(q(c) for c in cols)
    t = f"{q(app_db)}.{q(table)}"  # (qualified: the SELECT's staging table has the same columns)
    newer = f"VALUES(`_zs_version`) > {t}.`_zs_version`"
    sets = [f"{t}.{q(c)} = IF({newer}, VALUES({q(c)}), {t}.{q(c)})" for c in cols[:-1]]
    sets.append(f"{t}.`_zs_version` = GREATEST({t}.`_zs_version`, VALUES(`_zs_version`))")
    name = table.replace("'", "''")
    return (
        f"INSERT INTO {q(app_db)}.{q(table)} ({col_sql}) "
        f"SELECT {', '.join('s.' + q(c) for c in cols)} FROM {q(STAGE_DB)}.{q(stage)} s "
        f"WHERE s.{q(CHUNK_COL)} = {int(chunk)} AND NOT EXISTS (SELECT 1 FROM zonesync.tombstones tb "
        f"WHERE tb.table_name = '{name}' AND tb.pk = {pk_text_sql('s', key_cols)} AND tb.version >= s.`_zs_version`) "
        f"ON DUPLICATE KEY UPDATE {', '.join(sets)}"
    )


def merge_chunk(conn, app_db: str, run_id: str, table: str, stage: str, columns, key_cols, chunk: int) -> int | None:
    """Merge one staged chunk (from the staging table `stage`) and mark it done, in one
    transaction; the number of rows staged for it, or None when it was done already."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET SESSION skip_replication = 1")
        conn.begin()
        try:
            cur.execute(
                "SELECT status FROM zonesync.copy_chunks WHERE run_id = %s AND table_name = %s AND chunk_no = %s "
                "FOR UPDATE",
                (run_id, table, chunk),
            )
            row = cur.fetchone()
            cur.execute(f"SELECT COUNT(*) FROM {q(STAGE_DB)}.{q(stage)} WHERE {q(CHUNK_COL)} = %s", (chunk,))
            staged = int(cur.fetchone()[0])
            if row is not None and row[0] == "done":
                conn.commit()
                return None
            landed = cur.execute(merge_statement(app_db, table, stage, list(columns), list(key_cols), chunk))
            cur.execute(
                "UPDATE zonesync.copy_chunks SET status = 'done', rows_read = %s, rows_landed = %s, done_at = NOW(6) "
                "WHERE run_id = %s AND table_name = %s AND chunk_no = %s",
                (staged, landed, run_id, table, chunk),
            )
            conn.commit()
            return staged
        except BaseException:
            conn.rollback()
            raise


# A merge takes gap locks (REPEATABLE READ) while the target's appliers write the same
# keys: InnoDB may pick it as a deadlock's victim, or it may wait past the lock timeout.
# Both roll its transaction back whole, and the chunk is merged again from staging.
RETRIED = (1213, 1205)


def merge_chunk_retrying(conn, app_db, run_id, table, stage, columns, key_cols, chunk, attempts: int = 10):
    """merge_chunk, again after a deadlock or lock wait timeout (up to `attempts` times)."""
    import random
    import time

    import pymysql

    for attempt in range(attempts):
        try:
            return merge_chunk(conn, app_db, run_id, table, stage, columns, key_cols, chunk)
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in RETRIED or attempt == attempts - 1:
                raise
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")


def drop_stage(conn, stage: str, waves_only: bool = False) -> None:
    """Drop the staging tables of a run and table (`waves_only`: the waves', not the
    candidates the prune step still reads)."""
    pattern = stage.replace("_", "\\_") + ("\\_w%" if waves_only else "%")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME LIKE %s",
            (STAGE_DB, pattern),
        )
        for (name,) in cur.fetchall():
            cur.execute(f"DROP TABLE IF EXISTS {q(STAGE_DB)}.{q(name)}")
    conn.commit()


def drop_table(conn, name: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {q(STAGE_DB)}.{q(name)}")
    conn.commit()
