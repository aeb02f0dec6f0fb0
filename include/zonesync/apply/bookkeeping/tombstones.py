"""Tombstones: the version at which a row was deleted, kept after the row is gone.

Without one, an older insert or update of a deleted row that arrives late (a
replay, a resend, another source's change) would find no row and bring it back.
A delete writes its tombstone in the same transaction (here, and dal/transaction.py
for a local delete); decide.py skips any change at or below it. They are kept for
a horizon only: no replay can reach further back than the kept checkpoints and
binlogs.
"""

from __future__ import annotations


def record(lit, name: str, tombstones: list[tuple[str, int]]) -> str:
    """The statement that writes (pk text, version) tombstones of table `name` (a literal),
    never moving one back to an older version."""
    return (
        "INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES "
        + ", ".join(f"({name}, {lit(text)}, {int(version)})" for text, version in tombstones)
        + " ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version)), deleted_at = NOW(6)"
    )


def forget_older_than(conn, horizon_s: float) -> int:
    """Forget tombstones older than the horizon (10000 at a time: a short transaction);
    returns how many went."""
    with conn.cursor() as cur:
        n = cur.execute(
            "DELETE FROM zonesync.tombstones WHERE deleted_at < NOW(6) - INTERVAL %s SECOND LIMIT 10000",
            (int(horizon_s),),
        )
    conn.commit()
    return n
