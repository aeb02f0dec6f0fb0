"""Resident tables at an applier: which of their rows this zone applies (docs/migration.md,
"Resident tables").

A resident table's rows live only in their locating entity's unit. The source zone's
replicator still publishes them (a migration's incremental half reads them from the
stream), and every other zone's applier skips them, except the rows of the entities
admitted in this zone (zonesync.resident_admits: a migration moving them here from
`source_zone`). Those are decided as a copy's are, by version alone (decide.py, "Copy
mode"): the stock copy fills the same rows meanwhile.

The admits and the stock copy must leave no gap: a change the applier skipped because it
did not know the admit yet must be in what the stock copy reads. So a transaction that
touches a resident table first reads zonesync.resident_admits_head with a shared lock,
held to its commit, and an admit moves that row's version in its own transaction
(migrate/resident.py). The admit's commit therefore waits for every applier transaction
that may have decided without it, and every later one sees it: once the admit is
committed, a skipped change is committed at the source already, and a stock copy read
after that point holds it. A withdrawn admit (after the flip, or on rollback) works the
same way round: once withdrawn, no transaction still applying the entity's rows is in
flight, and the purge that follows removes everything.

The admits are read again only when the head's version moved: one extra small locking
read per transaction that touches a resident table, none for the others.

The admitted events of a `replace_key` table are kept (so a held table parks them as any
other), marked with their run, and landed by `land_replaced` once the transaction has
claimed its positions, through the target's key map (replaced_keys.py: each row under the
key this zone gave it), not by the batch.
"""

from __future__ import annotations

from zonesync.apply.batch import replaced_keys
from zonesync.events import ChangeEvent, decode_row

HEAD = "SELECT version FROM zonesync.resident_admits_head WHERE id = 1 LOCK IN SHARE MODE"
ADMITS = "SELECT source_zone, le_type, le_id, run_id FROM zonesync.resident_admits"


class ResidentGate:
    """The applier's resident tables (from the newest rules) and this zone's admits."""

    def __init__(self):
        # table -> (entity type, entity column, replace_key): the applier's, replaced whole when the rules change
        self.tables: dict[str, tuple[str, str, bool]] = {}
        self._version: int | None = None
        self._admitted: dict[tuple[str, str, str], str] = {}  # (source zone, le_type, le_id) -> run id
        self._runs: dict[int, str] = {}  # id(event) -> its run: the last call's admitted replace_key events

    def kept(self, conn, changes: list[tuple[str, list[ChangeEvent]]]) -> tuple[list, int]:
        """(the changes without the resident rows this zone does not apply, how many events
        were left out). Run first in the transaction that applies them: its shared lock on
        the admits' head is what makes an admit wait for this transaction (see above). The
        admitted events of replace_key tables stay, marked for `land_replaced`."""
        self._runs = {}
        tables = self.tables
        if not tables or not any(e.table in tables for _, events in changes for e in events):
            return changes, 0
        with conn.cursor() as cur:
            cur.execute(HEAD)
            row = cur.fetchone()
            version = int(row[0]) if row else 0
            if version != self._version:
                cur.execute(ADMITS)
                self._admitted = {(s, t, i): run for s, t, i, run in cur.fetchall()}
                self._version = version
            kept, dropped = [], 0
            for source_zone, events in changes:
                mine = []
                for e in events:
                    if e.table not in tables:
                        mine.append(e)
                    elif (run_id := self.admits(source_zone, e)) is not None:
                        if tables[e.table][2]:  # replace_key: landed through the map (land_replaced)
                            self._runs[id(e)] = run_id
                        mine.append(e)
                dropped += len(events) - len(mine)
                kept.append((source_zone, mine))
        return kept, dropped

    def land_replaced(self, cur, changes: list[tuple[str, list[ChangeEvent]]], landed=None) -> tuple[list, int]:
        """The marked replace_key events landed through the key map, in order (after the
        positions' claim, in the same transaction), and the changes without them; how many.
        `landed(source, event)`, when given, says whether to land one now (the serial
        apply's stopped partitions: not past their stop)."""
        if not self._runs:
            return changes, 0
        out, n = [], 0
        for source_zone, events in changes:
            rest = []
            for e in events:
                run_id = self._runs.get(id(e))
                if run_id is None:
                    rest.append(e)
                elif landed is None or landed(source_zone, e):
                    replaced_keys.apply_event(cur, run_id, e)
                    n += 1
            out.append((source_zone, rest))
        return out, n

    def admits(self, source_zone: str, e: ChangeEvent) -> str | None:
        """The run admitting here, from `source_zone`, the entity the row of `e` (a resident
        table's) belongs to; None when none does."""
        if not self._admitted:
            return None
        le_type, column, _ = self.tables[e.table]
        image = e.new if e.new is not None else e.old
        value = image.get(column) if image is not None else None
        if type(value) is dict:  # a tagged value (a decimal column, say)
            value = decode_row({column: value})[column]
        return None if value is None else self._admitted.get((source_zone, le_type, str(value)))


def resident_tables(rules) -> dict[str, tuple[str, str, bool]]:
    """{table: (entity type, entity column, replace_key)} of a rule set's resident tables."""
    return {name: (t.entity.type, t.entity.column, t.replace_key) for name, t in rules.resident_tables().items()}
