"""A migration's stock copy of a `replace_key` table (docs/migration.md, "Replaced keys";
the protocol: apply/batch/replaced_keys.py).

The Spark job (spark_jobs/full_copy.py) copies the moving rows by key-range chunks as for
any resident table, but lands them in a stage in the target, zonesync.<stage_table>: the
table's definition, keyed by the source's key, so no source key meets a target row there.
Once every chunk is done, the driver merges the stage into the table through the key map,
pushed down to the target, a batch of source keys per transaction:

0. check the run is still admitted here, under the admits' head shared lock (as an
   applier's transaction reads it): a rollback's withdraw waits for the batch, and a
   merge still running after its task was killed and the run rolled back stops there
   instead of landing rows nobody admits;
1. claim the batch's entries (INSERT … SELECT … ON DUPLICATE KEY UPDATE: exclusive locks,
   also on the entries there) and lock them (FOR UPDATE): the applier, landing the
   stream's events of the same keys, waits, and so do we for it (a deadlock or lock wait
   timeout all the same: the batch is tried again);
2. the mapped keys whose staged row is newer than the entry: the target row updated in
   place (one multi-table UPDATE), the entry's version moved;
3. the unmapped ones (never landed, or deleted at an older version) newer than the entry:
   inserted without their key in source-key order by one INSERT … SELECT, which takes
   consecutive values of the target's AUTO_INCREMENT (a bulk insert holds its AUTO-INC lock
   to the end under innodb_autoinc_lock_mode 0 or 1, which admit requires), spaced by
   auto_increment_increment; each entry records its key.

A staged row at or below its entry's version is older than what the stream landed (or
deleted), and stays out. A merge killed part-way leaves whole batches; run again (a re-run
of the stock finds its chunks done) it lands only what is left. The session sets
skip_replication, as the applier's and the copy's do: the target's replicator never
publishes the merged rows (S001-13). The stage is dropped once merged (and by the
migration's rollback).
"""

from __future__ import annotations

import hashlib

from zonesync.apply.batch.replaced_keys import RECORD
from zonesync.apply.batch.resident import HEAD
from zonesync.apply.batch.statements import q

STAGE_DB = "zonesync"
VERSION = "_zs_version"
BATCH = 1000
MAP = "zonesync.key_map"


def stage_table(run_id: str, table: str) -> str:
    """The stage's name: short and stable per run and table."""
    return "key_stage_" + hashlib.sha1(f"{run_id}\0{table}".encode()).hexdigest()[:12]


def create_stage(conn, app_db: str, table: str, stage: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {q(STAGE_DB)}.{q(stage)} LIKE {q(app_db)}.{q(table)}")
    conn.commit()


def drop_stage(conn, stage: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {q(STAGE_DB)}.{q(stage)}")
    conn.commit()


def merge(conn, run_id: str, app_db: str, table: str, key: str, columns: list[str], stage: str,
          batch: int = BATCH) -> int:  # fmt: skip
    """Merge the stage into the table through the key map (see above); rows landed."""
    staged = f"{q(STAGE_DB)}.{q(stage)}"
    landed, last = 0, None
    with conn.cursor() as cur:
        cur.execute("SELECT @@session.auto_increment_increment")
        step = int(cur.fetchone()[0])
        cur.execute("SET SESSION skip_replication = 1")
        try:
            while True:
                after = "" if last is None else f"WHERE {q(key)} > {int(last)} "
                cur.execute(f"SELECT {q(key)} FROM {staged} {after}ORDER BY {q(key)} LIMIT {int(batch)}")
                keys = [int(r[0]) for r in cur.fetchall()]
                conn.commit()
                if not keys:
                    return landed
                landed += _retried(conn, lambda keys=keys: _merge_batch(conn, cur, (run_id, table), app_db, key,
                                                                        columns, staged, keys, step))  # fmt: skip
                last = keys[-1]
        finally:
            conn.rollback()
            cur.execute("SET SESSION skip_replication = 0")


def _retried(conn, batch, attempts: int = 5) -> int:
    """A batch run again after a deadlock or a lock wait timeout (rolled back whole: the
    applier, landing the same keys, went first)."""
    import pymysql

    for attempt in range(attempts):
        try:
            return batch()
        except pymysql.err.OperationalError as exc:
            conn.rollback()
            if not exc.args or exc.args[0] not in (1205, 1213) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class NotAdmitted(RuntimeError):
    """The run no longer admits its LEs here (rolled back): the merge stops, landing nothing."""


def _merge_batch(conn, cur, entry: tuple[str, str], app_db: str, key: str, columns: list[str], staged: str,
                 keys: list[int], step: int) -> int:  # fmt: skip
    lo, hi = keys[0], keys[-1]
    target = f"{q(app_db)}.{q(entry[1])}"
    span = f"m.run_id = %s AND m.table_name = %s AND m.source_key BETWEEN {lo} AND {hi}"
    cur.execute("START TRANSACTION")
    cur.execute(HEAD)  # (an applier's transaction reads it the same way)
    cur.execute("SELECT COUNT(*) FROM zonesync.resident_admits WHERE run_id = %s", (entry[0],))
    if not cur.fetchone()[0]:
        raise NotAdmitted(f"{entry[1]}: run {entry[0]} no longer admits its LEs in this zone (rolled back?): "
                          "the merge stops")  # fmt: skip
    claim = f"SELECT %s, %s, {q(key)}, NULL, 0 FROM {staged} WHERE {q(key)} BETWEEN {lo} AND {hi}"
    cur.execute(f"INSERT INTO {MAP} (run_id, table_name, source_key, target_key, version) {claim} "
                "ON DUPLICATE KEY UPDATE source_key = source_key", entry)  # fmt: skip
    cur.execute(f"SELECT m.source_key FROM {MAP} m WHERE {span} FOR UPDATE", entry)
    others = [c for c in columns if c != key]
    sets = ", ".join(f"t.{q(c)} = s.{q(c)}" for c in others)
    updated = cur.execute(
        f"UPDATE {target} t JOIN {MAP} m ON m.target_key = t.{q(key)} JOIN {staged} s ON s.{q(key)} = m.source_key "
        f"SET {sets}, m.version = s.{q(VERSION)} WHERE {span} AND m.target_key IS NOT NULL "
        f"AND s.{q(VERSION)} > m.version",
        entry,
    )
    newer = f"s.{q(VERSION)} > m.version"
    cur.execute(f"SELECT s.{q(key)}, s.{q(VERSION)} FROM {staged} s JOIN {MAP} m ON m.source_key = s.{q(key)} "
                f"WHERE {span} AND m.target_key IS NULL AND {newer} ORDER BY s.{q(key)}", entry)  # fmt: skip
    fresh = list(cur.fetchall())
    if fresh:
        names = ", ".join(q(c) for c in others)
        wanted = ", ".join(str(int(k)) for k, _ in fresh)
        n = cur.execute(f"INSERT INTO {target} ({names}) SELECT {names} FROM {staged} WHERE {q(key)} IN ({wanted}) "
                        f"ORDER BY {q(key)}")  # fmt: skip
        if n != len(fresh):
            raise RuntimeError(f"{entry[1]}: inserted {n} rows of {len(fresh)} staged; nothing of the batch is kept")
        first = int(cur.lastrowid)
        cur.executemany(RECORD, [(first + i * step, v, *entry, k) for i, (k, v) in enumerate(fresh)])
    conn.commit()
    # (a multi-table UPDATE counts the map's entries it moved too)
    return updated // 2 + len(fresh)
