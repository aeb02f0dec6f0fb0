"""A migration's resident tables (docs/migration.md, "Resident tables"): the locating
entities' rows that live only in their unit move with them.

    admit    (target, before the stock) the target's stale copies of the LEs' resident
             rows purged, then the LEs admitted: from the admit's commit on, the target's
             appliers apply the LEs' resident rows from the source's stream (the
             incremental half), and no applier transaction that skipped one is still
             uncommitted (apply/batch/resident.py: the admits' head lock), so
    stock    (Spark, spark_jobs/full_copy.py with each table's entity predicate) read
             after the admit misses nothing the stream skipped; both land by version
             (the copy's version-guarded statements, the applier's copy mode), so the
             order they meet a row in does not matter, and a delete the stream applied
             first keeps the copy's older row away (tombstones, S000-76).
    ...      verify, stop-write, sync to P, final check, flip, lift: as for replicated
             tables (steps.py); "the target applied the source up to P" is the Last LE
             Data mark: every write of the LEs is before P (S004-20/21).
    release  (after the lift) the admits withdrawn and the source's copy purged, as a
             maintenance write no replicator publishes (S004-37: units keep data apart).
    rollback (before the flip) the admits withdrawn, then the target's partial copy purged.

State lives with the data it describes: an LE is admitted while the target's
zonesync.resident_admits holds its row (run_id: the migration's), so a re-run re-reads it.
"""

from __future__ import annotations

from zonesync.check.request import entity_tables
from zonesync.check.sql import entity_predicate
from zonesync.copy.chunks import check_copyable as copyable
from zonesync.copy.chunks import key_columns, unique_keys
from zonesync.copy.request import CopyRefused
from zonesync.migrate.request import MigrationRefused
from zonesync.rules.model import RuleSet
from zonesync.sql_names import quote

PURGE_BATCH = 5000


def tables(rules: RuleSet, entities: dict[str, list[str]]) -> dict[str, str]:
    """{resident table: the SQL predicate of the LEs' rows} (none: nothing resident moves)."""
    resident = rules.resident_tables()
    return {name: entity_predicate(resident[name], entities) for name in entity_tables(resident, set(entities))}


def stock_spec(rules: RuleSet, predicates: dict[str, str], run_id: str = "") -> dict[str, dict]:
    """The stock copy's --where-json: {table: {where: its predicate, entity: its entity column
    [, replace_key: the run whose key map its rows land through]}}."""
    out = {}
    for t, w in predicates.items():
        out[t] = {"where": w, "entity": rules.tables[t].entity.column}
        if rules.tables[t].replace_key:
            out[t]["replace_key"] = run_id
    return out


def check_copyable(conn, spec: dict[str, dict], zone: str, target: bool = True) -> None:
    """MigrationRefused naming a resident table the stock copy (the full copy's job) cannot
    take in this zone: missing, no integer primary key, or a unique key without its entity
    column. `spec`: stock_spec's."""
    schema = _schema(conn)
    for table in sorted(spec):
        try:
            copyable(conn, schema, table, zone, spec[table]["entity"])
        except CopyRefused as exc:
            raise MigrationRefused(f"{exc} (a resident table moves by the full copy's statements)") from None
        _check_entity_index(conn, schema, table, spec[table]["entity"], zone)
        if spec[table].get("replace_key"):
            _check_replaceable(conn, schema, table, zone, target)


def _check_entity_index(conn, schema: str, table: str, column: str, zone: str) -> None:
    """MigrationRefused unless an index of the table starts with its entity column: the
    stock copy plans, reads and locks the LEs' rows through it (without one, each step
    would scan the table, and the target's locking reads could lock other entities' rows)."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                    "AND SEQ_IN_INDEX = 1 AND COLUMN_NAME = %s", (schema, table, column))  # fmt: skip
        (found,) = cur.fetchone()
    conn.commit()
    if not found:
        raise MigrationRefused(f"tables: {table} has no index that starts with its entity column {column} in zone "
                               f"{zone}: the stock copy finds the moving rows through one; add it (CREATE INDEX "
                               f"idx_{table}_{column} ON {table} ({column}))")  # fmt: skip


def _check_replaceable(conn, schema: str, table: str, zone: str, target: bool) -> None:
    """MigrationRefused unless a replace_key table's rows can take new keys from this zone's
    AUTO_INCREMENT as copy/replaced_stage.py does: one AUTO_INCREMENT key column, no other
    unique key (a bulk insert meeting one would upset the keys' count), and consecutive
    values for a bulk insert (innodb_autoinc_lock_mode 0 or 1)."""
    fix = '(docs/migration.md, "Replaced keys")'
    with conn.cursor() as cur:
        cur.execute("SELECT k.COLUMN_NAME, c.EXTRA FROM information_schema.KEY_COLUMN_USAGE k JOIN "
                    "information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND c.TABLE_NAME = k.TABLE_NAME "
                    "AND c.COLUMN_NAME = k.COLUMN_NAME WHERE k.TABLE_SCHEMA = %s AND k.TABLE_NAME = %s "
                    "AND k.CONSTRAINT_NAME = 'PRIMARY'", (schema, table))  # fmt: skip
        key = cur.fetchall()
        cur.execute("SELECT @@GLOBAL.innodb_autoinc_lock_mode")
        (mode,) = cur.fetchone()
    conn.commit()
    if len(key) != 1 or "auto_increment" not in (key[0][1] or "").lower():
        raise MigrationRefused(f"tables: {table} is replace_key but its primary key in zone {zone} is not one "
                               f"AUTO_INCREMENT column: make it one, or drop replace_key {fix}")  # fmt: skip
    unique = unique_keys(conn, schema, table)
    if unique:
        raise MigrationRefused(f"tables: {table} is replace_key and has unique keys besides its primary key "
                               f"({', '.join(unique)}): not supported yet {fix}")  # fmt: skip
    if target and int(mode) not in (0, 1):  # (only the target's counter gives keys)
        raise MigrationRefused(
            f"zone {zone} runs innodb_autoinc_lock_mode {mode}: replace_key tables need 0 or 1 "
            f"(consecutive keys for a bulk insert): set it in the server's config {fix}"
        )


def count(conn, predicates: dict[str, str]) -> int:
    """How many rows the predicates select in this zone, all tables together."""
    total = 0
    with conn.cursor() as cur:
        for table, where in sorted(predicates.items()):
            cur.execute(f"SELECT COUNT(*) FROM {quote(table)} WHERE {where}")
            total += int(cur.fetchone()[0])
    conn.commit()
    return total


def admitted(conn, run_id: str) -> bool:
    """Whether this zone admits the run's LEs now."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.resident_admits WHERE run_id = %s", (run_id,))
        (n,) = cur.fetchone()
    conn.commit()
    return n > 0


def _move_head(cur) -> None:
    """Open the admits' change: one transaction (whatever the connection's autocommit) that
    first moves the head, so it waits for every applier transaction in flight that read it."""
    cur.execute("START TRANSACTION")
    cur.execute("UPDATE zonesync.resident_admits_head SET version = version + 1 WHERE id = 1")


def admit(conn, run_id: str, source_zone: str, les: list[tuple[str, str]]) -> None:
    """The LEs admitted in this zone from `source_zone`, in one transaction that moves the
    admits' head: it waits for every applier transaction in flight that read the head."""
    with conn.cursor() as cur:
        _move_head(cur)
        cur.executemany(
            "INSERT INTO zonesync.resident_admits (le_type, le_id, source_zone, run_id) VALUES (%s, %s, %s, %s) "
            "ON DUPLICATE KEY UPDATE source_zone = VALUES(source_zone), run_id = VALUES(run_id), since = NOW(6)",
            [(t, i, source_zone, run_id) for t, i in les],
        )
    conn.commit()


def withdraw(conn, run_id: str) -> int:
    """The run's admits withdrawn, the same way (once committed, no applier transaction
    still applying the LEs' rows is in flight); how many there were."""
    with conn.cursor() as cur:
        _move_head(cur)
        n = cur.execute("DELETE FROM zonesync.resident_admits WHERE run_id = %s", (run_id,))
    conn.commit()
    return n


def purge(conn, predicates: dict[str, str], batch: int = PURGE_BATCH, each_batch=None) -> dict[str, int]:
    """The rows each predicate selects deleted in this zone as a maintenance write:
    skip_replication (no replicator publishes it) and no tombstone (a later migration back
    brings the rows at their versions, which a tombstone at the same version would keep
    away). Chunked by primary-key ranges of at most `batch` matching rows, each chunk its
    own short transaction, so no lock is held long and a killed purge resumes where it
    stopped (a re-run finds only what is left). `each_batch(cur)`, when given, runs first
    in each chunk's transaction (to lock and re-check what allows the delete; it raises to
    stop). {table: rows deleted}."""
    out = {}
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        try:
            for table, where in sorted(predicates.items()):
                out[table] = _purge_table(conn, cur, table, where, batch, each_batch)
        finally:
            conn.rollback()  # (a chunk stopped part-way: the flag cannot change inside its transaction)
            cur.execute("SET SESSION skip_replication = 0")
    conn.commit()
    return out


def forget_keys(conn, run_id: str, stages: list[str]) -> int:
    """A rolled-back run's key map (its rows purged already) and its stock's stages
    (replaced_stage.py) dropped in this zone; how many entries there were."""
    from zonesync.copy import replaced_stage

    for stage in stages:
        replaced_stage.drop_stage(conn, stage)
    with conn.cursor() as cur:
        n = cur.execute("DELETE FROM zonesync.key_map WHERE run_id = %s", (run_id,))
    conn.commit()
    return n


def key_of(conn, table: str) -> list[str]:
    """The table's primary-key columns in this zone (MigrationRefused when it has none)."""
    cols = [c for c, _ in key_columns(conn, _schema(conn), table)]
    if not cols:
        raise MigrationRefused(f"tables: {table} is missing in this zone or has no primary key")
    return cols


def _schema(conn) -> str:
    """The database the zone's connection uses (the app's)."""
    with conn.cursor() as cur:
        cur.execute("SELECT DATABASE()")
        return cur.fetchone()[0]


def _after(cols: list[str], last: tuple | None, hi: tuple | None) -> tuple[str, list]:
    """The key-range condition (last, hi] with its arguments."""
    key = quote(cols[0]) if len(cols) == 1 else "(" + ", ".join(map(quote, cols)) + ")"
    marks = "%s" if len(cols) == 1 else "(" + ", ".join(["%s"] * len(cols)) + ")"
    parts, args = [], []
    if last is not None:
        parts.append(f"{key} > {marks}")
        args += list(last)
    if hi is not None:
        parts.append(f"{key} <= {marks}")
        args += list(hi)
    return " AND ".join(parts) or "TRUE", args


def _purge_table(conn, cur, table: str, where: str, batch: int, each_batch) -> int:
    cols = key_of(conn, table)
    keys = ", ".join(map(quote, cols))
    where = where.replace("%", "%%")  # (the statements take arguments: an id's % is a literal one)
    deleted, last = 0, None
    while True:
        cur.execute("START TRANSACTION")
        if each_batch is not None:
            each_batch(cur)
        after, args = _after(cols, last, None)
        cur.execute(f"SELECT {keys} FROM {quote(table)} WHERE {where} AND {after} ORDER BY {keys} "
                    f"LIMIT 1 OFFSET {int(batch) - 1}", args)  # fmt: skip
        row = cur.fetchone()
        hi = tuple(row) if row is not None else None
        span, args = _after(cols, last, hi)
        deleted += cur.execute(f"DELETE FROM {quote(table)} WHERE {where} AND {span}", args)
        conn.commit()
        if hi is None:
            return deleted
        last = hi
