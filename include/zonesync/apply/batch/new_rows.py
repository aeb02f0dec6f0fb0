"""New rows: changes written as a plain INSERT without reading the target first.

A change that starts with an insert and ends with a row needs no old-row check,
only "no newer row, tombstone or lock". For a table whose last look found no
tombstone and no locked row, such changes are written as a plain INSERT in the
first request, before the reads of the other keys, and the same request asks
again whether the table has any tombstone or locked row (target_rows.py). The
INSERT fails on any key that exists (a row of the target, one just written by
another source's events or by a local writer); the question, asked after the
INSERT took its row locks, sees any tombstone committed before them (a later
local delete waits for our commit). Either outcome rolls the transaction back
(NotAllNew, or the INSERT's duplicate key) and applies it again the read-first
way, which decides row by row. Bulk loads of new rows (a catch-up, a migration)
thereby cost the target one INSERT per row instead of a locking read and an
upsert. A source's batch of nothing but inserts is not even merged: its keys are
unique (the source's primary key), and a repeated one fails the INSERT like any
other.

Where it can, the INSERT is a LOAD DATA LOCAL sent from memory (load_data.py):
the same outcomes, at about two thirds of the target's CPU, once check_loaded
has made its skipped keys and truncated values fail as the INSERT would.

Which tables were last found marked (a tombstone or a locked row) is the
writer's hint only: correctness comes from asking after the INSERT.
"""

from __future__ import annotations

from zonesync.apply.batch import load_data
from zonesync.apply.batch.statements import inserts, q
from zonesync.apply.errors import NotAllNew


def statements(cur, lit, table: str, rows: list[dict], load: bool) -> tuple[list[str], int]:
    """The statements that write these rows as new, and how many rows a LOAD DATA among
    them must load: one LOAD DATA (when `load`: the server has not refused one), its rows
    handed to the connection (load_data.py), or multi-row INSERTs (0)."""
    data = load_data.payload(rows, lit) if load else None
    if data is None:
        return inserts(lit, table, rows), 0
    cur.connection.payload = data
    return [load_data.statement(q(table), ", ".join(q(c) for c in rows[0]))], len(rows)


def check_loaded(cur, loaded: int, table: str) -> None:
    """NotAllNew unless the LOAD DATA just read loaded all `loaded` rows without a warning:
    LOCAL skips a duplicate key and truncates a value that does not fit, with a warning
    each, where the INSERT would have failed."""
    if cur.rowcount != loaded or cur._result.warning_count:
        raise NotAllNew(table)
