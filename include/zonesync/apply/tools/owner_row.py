"""One row by primary key, read from its owner and put in place of another zone's copy:
what `zonesync locks resolve` (S003-31) and a consistency check's repair both do.

Both read and write under `time_zone = '+00:00'` (set by the caller's session for the
write): a TIMESTAMP is then the same instant in every zone, whatever each server's own
time zone is."""

from __future__ import annotations

from zonesync.apply.batch.statements import q


def _where(key: dict) -> tuple[str, list]:
    return " AND ".join(f"{q(c)} = %s" for c in key), list(key.values())


def read_row(cur, table: str, key: dict, lock: bool = False) -> dict | None:
    """The row of `table` whose primary key is `key` ({column: value}), as {column: value};
    None when there is none. `lock`: FOR UPDATE (the key's gap too, when absent)."""
    where, args = _where(key)
    cur.execute(f"SELECT * FROM {q(table)} WHERE {where}{' FOR UPDATE' if lock else ''}", args)
    row = cur.fetchone()
    if row is None:
        return None
    if isinstance(row, dict):
        return row
    return dict(zip([d[0] for d in cur.description], row, strict=True))


def put_row(cur, table: str, key: dict, row: dict | None) -> None:
    """Make the zone's row of `key` exactly `row`, every column (its _zs_origin and
    _zs_version included): upserted, or deleted when `row` is None."""
    where, args = _where(key)
    if row is None:
        cur.execute(f"DELETE FROM {q(table)} WHERE {where}", args)
        return
    columns = list(row)
    cur.execute(
        f"INSERT INTO {q(table)} ({', '.join(map(q, columns))}) VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON DUPLICATE KEY UPDATE {', '.join(f'{q(c)} = VALUES({q(c)})' for c in columns if c not in key)}",
        list(row.values()),
    )
