"""Replaced keys (seed 004's need-replace-pk: 是否需要替换 PK 字段 … 插入前替换掉;
docs/migration.md, "Replaced keys"; S004-35/38).

A `replace_key` resident table is keyed by each zone's own AUTO_INCREMENT, so a tenant's
row moving from a to b may carry a key another tenant's row already holds in b. A
migration therefore gives every moving row a new key from b's AUTO_INCREMENT, and keeps
which source key became which in b's zonesync.key_map (include/sql/zone/0008_key_map.sql),
with the rows it describes:

    (run, table, source key) -> (target key or NULL, version)

Two writers land the moving rows, and both go through the map, never through the key:

- the stream (this module, `apply_event`, from the applier's resident gate): each
  admitted event of the table, one at a time, in the source's order;
- the stock copy (copy/replaced_stage.py): the rows the Spark job staged in b, a batch at
  a time, set-based.

The protocol, per source key, inside the writer's transaction:

1. claim: insert the key's entry (target NULL, version 0), or lock the one there, with
   an exclusive lock (ON DUPLICATE KEY UPDATE), and read it `FOR UPDATE`. The entry is
   locked to the commit, so the other writer of the same key waits: two writers never
   both find it unmapped and land two rows.
2. decide by version, as the applier does (S000-71..76): a change at or below the
   entry's version is older than what landed (or a replay) and changes nothing;
3. write: a delete removes the target row and leaves the entry with target NULL at the
   delete's version (the tombstone: an older copy of the row never lands again); an
   insert or update writes the row at the target key, or, unmapped, inserts it without a
   key, so b's AUTO_INCREMENT gives it one, and records that key.

So a later update that arrives with the source key lands on the row it became (S004-38),
never on the b row that holds the source key, and a replay changes nothing. The target
row is only ever this run's: its key came from b's own counter.
"""

from __future__ import annotations

from zonesync.apply.batch.statements import q
from zonesync.events import ChangeEvent, decode_row

# claimed with an exclusive lock from the start (an existing entry's too: ON DUPLICATE KEY
# UPDATE locks it exclusively, where INSERT IGNORE would take a shared lock the FOR UPDATE
# then upgrades, and two writers upgrading the same entry deadlock)
CLAIM = (
    "INSERT INTO zonesync.key_map (run_id, table_name, source_key, target_key, version) "
    "VALUES (%s, %s, %s, NULL, 0) ON DUPLICATE KEY UPDATE source_key = source_key"
)
ENTRY = "run_id = %s AND table_name = %s AND source_key = %s"
LOCK = f"SELECT target_key, version FROM zonesync.key_map WHERE {ENTRY} FOR UPDATE"
RECORD = f"UPDATE zonesync.key_map SET target_key = %s, version = %s WHERE {ENTRY}"


def source_key(e: ChangeEvent) -> tuple[str, int]:
    """(key column, source key) of an event of a replaced-key table (one integer column)."""
    ((column, value),) = e.pk.items()
    return column, int(value)


def apply_event(cur, run_id: str, e: ChangeEvent) -> bool:
    """Land one admitted event of a replaced-key table through the map (see above), in the
    caller's transaction; whether it changed anything."""
    column, key = source_key(e)
    entry = (run_id, e.table, key)
    cur.execute(CLAIM, entry)
    cur.execute(LOCK, entry)
    target, landed = cur.fetchone()
    if e.version <= landed:
        return False
    if e.op == "delete":
        if target is not None:
            cur.execute(f"DELETE FROM {q(e.table)} WHERE {q(column)} = %s", (target,))
        cur.execute(RECORD, (None, e.version, *entry))
        return True
    row = decode_row(e.new)
    cur.execute(RECORD, (write_row(cur, e.table, column, row, target), e.version, *entry))
    return True


def write_row(cur, table: str, column: str, row: dict, target: int | None) -> int:
    """The row written at `target`, or (None) inserted without its key, b's AUTO_INCREMENT
    giving it one; the target key."""
    cols = [c for c in row if c != column]
    values = [row[c] for c in cols]
    names = ", ".join(q(c) for c in cols)
    marks = ", ".join(["%s"] * len(cols))
    if target is None:
        cur.execute(f"INSERT INTO {q(table)} ({names}) VALUES ({marks})", values)
        return int(cur.lastrowid)
    sets = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in cols)
    cur.execute(f"INSERT INTO {q(table)} ({q(column)}, {names}) VALUES (%s, {marks}) ON DUPLICATE KEY UPDATE {sets}",
                [target, *values])  # fmt: skip
    return int(target)
