"""Tables held in a target zone: definitions that disagree, and what the appliers do then.

Events are applied by column name (the replicator reads FULL row metadata), so no value
ever lands in the wrong column. What can still go wrong is a table whose definition here
disagrees with the events arriving for it: a column renamed or dropped on one side, a
column added at the source before here, a column retyped so that values no longer fit,
a changed primary key. The target refuses such a batch (unknown column, no default,
value out of range or too long, ...) or the writer finds the key differs. Retrying can
never help, and before holds every other table waited behind it.

The protocol (zone tables: include/sql/zone/0007_table_holds.sql):

1. Hold. The writer names the tables at fault and how (diagnose(): the events' columns
   against the target's, then the server's message), as SchemaMismatch; the applier
   records a hold per table (status `held`, the difference and the newest DDL on it in
   the detail), alerts `table_held`, and restarts its pass from apply_state.
2. Park. In every transaction that carries events of a table the applier knows held,
   the gate (TableHolds.kept) reads the holds with a shared lock and moves events into
   zonesync.parked_events, in the same transaction that moves their partitions on. A
   hold found by the columns or the key (`misfits`) parks the events that do not fit
   the table here, and from the first of them every later event of that table in that
   partition (so a key's events stay in order); the events that still fit (the other
   shape's, from partitions not parking yet) are applied. A hold found by a value
   (`all`) parks every event of the table. Every other table's events are applied as
   before. Atomicity of a source transaction that spans a held table is given up for
   the held table's parked rows (they follow later).
3. Cure. An operator makes the definitions agree (the schema_change DAG, or by hand) and
   resumes the table (`zonesync schema resume`): status `draining`.
4. Drain. The applier, once a second, applies the parked events oldest first (by id: a
   partition's events were parked in its order, so every key keeps its order), through
   the writer's usual decisions and paths, then deletes them (settle()). New events of
   the table are still parked meanwhile (the hold is there). The settle that finds
   nothing left deletes the hold, under an exclusive lock on the hold's row that waits
   for every parking transaction in flight (they hold it shared): once it commits, no
   event of the table is parked any more, and none is left parked. A crash between an
   apply and its settle applies those events again: their versions make it a no-op. A
   serial apply that stops a partition before an event (a unique value, versions still
   to come) settles only the events before it; the rest is tried again a second later.
   If the drained events still do not fit, the hold goes back to `held` with the new
   difference and a new alert.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import pymysql

from zonesync.apply.errors import SchemaMismatch
from zonesync.events import ChangeEvent
from zonesync.runtime.endpoints import primary_key

HELD, DRAINING = "held", "draining"
MISFITS, ALL = "misfits", "all"  # what a hold parks (table_holds.park)
NO_SUCH_TABLE = 1146
DRAIN_BATCH = 2000  # parked events applied per transaction

# The target's refusals that mean its definition disagrees with the events (MariaDB and
# MySQL codes): unknown column, no default, NULL into NOT NULL, incorrect value, out of
# range, truncated, incorrect date/time, too long.
DEFINITION_ERRORS = frozenset({1054, 1364, 1048, 1366, 1264, 1265, 1292, 1406})

# "Unknown column 'c' in ...", "... for column `db`.`t`.`c` at row 1", "Field 'c' doesn't have ..."
_COLUMN_IN_MESSAGE = re.compile(r"(?:column|field)\s+((?:[`'][^`']+[`']\.?)+)", re.IGNORECASE)


class Shape(NamedTuple):
    """What an event must match to fit a table here: its columns, those a row must give, the key."""

    columns: frozenset[str]
    required: frozenset[str]
    key: frozenset[str]

    def fits(self, e: ChangeEvent) -> bool:
        image = e.new if e.new is not None else e.old
        names = image.keys() if image is not None else self.columns
        return names <= self.columns and self.required <= names and e.pk.keys() == self.key


class TableHolds:
    """A writer's gate: the tables it knows held (the applier's, replaced whole once a
    second), and the parking of their events."""

    def __init__(self):
        self.tables: frozenset[str] = frozenset()
        self._shapes: dict[str, Shape] = {}  # held tables' definitions here, read once (forget)

    def forget(self, table: str) -> None:
        self._shapes.pop(table, None)

    def kept(self, conn, changes: list[tuple[str, list[ChangeEvent]]]) -> list:
        """The changes without the events parked. Run in the transaction that applies
        the rest: the holds are read under a shared lock, so a drain that drops a hold
        waits for this transaction (see above). A hold parking misfits parks an event that
        does not fit the table here, and every later event of its partition (a key's
        events stay in order); the rest is applied."""
        tables = self.tables
        if not tables:
            return changes
        present = {e.table for _, events in changes for e in events} & tables
        if not present:
            return changes
        marks = ", ".join(["%s"] * len(present))
        with conn.cursor() as cur:
            cur.execute(f"SELECT table_name, park FROM zonesync.table_holds WHERE table_name IN ({marks}) "
                        "LOCK IN SHARE MODE", sorted(present))  # fmt: skip
            held = dict(cur.fetchall())
            if not held:
                return changes
            picky = sorted(t for t, park in held.items() if park == MISFITS)
            parking: set[tuple[str, str, int]] = set()
            if picky:
                cur.execute(
                    "SELECT DISTINCT table_name, source_zone, partition_no FROM zonesync.parked_events "
                    f"WHERE table_name IN ({', '.join(['%s'] * len(picky))})",
                    picky,
                )
                parking = {(t, s, int(p)) for t, s, p in cur.fetchall()}
            shapes = self._shapes_of(conn, picky)
            parked, kept = [], []
            for source, events in changes:
                mine = []
                for e in events:
                    park = held.get(e.table)
                    where = (e.table, source, e.partition)
                    if park is None or (park == MISFITS and where not in parking and shapes[e.table].fits(e)):
                        mine.append(e)
                        continue
                    parking.add(where)
                    parked.append((e.table, source, e.partition, e.lsn, e.to_json()))
                kept.append((source, mine))
            if parked:
                cur.executemany(
                    "INSERT INTO zonesync.parked_events (table_name, source_zone, partition_no, lsn, event) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    parked,
                )
        return kept

    def _shapes_of(self, conn, tables: list[str]) -> dict[str, Shape]:
        missing = [t for t in tables if t not in self._shapes]
        if missing:
            columns = target_columns(conn, missing)
            for table in missing:
                have = columns.get(table, {})
                required = frozenset(c for c, req in have.items() if req)
                self._shapes[table] = Shape(frozenset(have), required, frozenset(primary_key(conn, table)))
        return {t: self._shapes[t] for t in tables}


def parked(conn, table: str, limit: int = DRAIN_BATCH) -> list[tuple[int, str, ChangeEvent]] | None:
    """A drain's first step: the oldest `limit` parked events of a draining table, as
    (id, source zone, event); None when the table is not draining (resumed by another
    applier of the zone meanwhile, or held again)."""
    with conn.cursor() as cur:
        cur.execute("SELECT status FROM zonesync.table_holds WHERE table_name = %s", (table,))
        row = cur.fetchone()
        if row is None or row[0] != DRAINING:
            conn.commit()
            return None
        cur.execute(
            "SELECT id, source_zone, event FROM zonesync.parked_events WHERE table_name = %s ORDER BY id LIMIT %s",
            (table, limit),
        )
        rows = cur.fetchall()
    conn.commit()
    return [(int(i), source, ChangeEvent.from_json(bytes(raw))) for i, source, raw in rows]


def by_source(taken: list[tuple[int, str, ChangeEvent]]) -> list[tuple[str, list[ChangeEvent]]]:
    """Parked events as the writer takes them: runs of one source, in parking order."""
    changes: list[tuple[str, list[ChangeEvent]]] = []
    for _id, source, event in taken:
        if changes and changes[-1][0] == source:
            changes[-1][1].append(event)
        else:
            changes.append((source, [event]))
    return changes


def settle(conn, table: str, through: int) -> bool:
    """A drain's last step, after the writer applied the parked events up to id `through`:
    they are deleted, and the hold with them when nothing else is parked. The hold's row is
    locked exclusively first, so every parking transaction in flight (holding it shared)
    has committed and its events are seen: once the hold is gone, no event of the table is
    parked and none is left. (A crash between the apply and this step applies the same
    events again next time: their versions make that a no-op.) True when the hold is gone."""
    with conn.cursor() as cur:
        cur.execute("SELECT status FROM zonesync.table_holds WHERE table_name = %s FOR UPDATE", (table,))
        row = cur.fetchone()
        if through > 0:
            cur.execute("DELETE FROM zonesync.parked_events WHERE table_name = %s AND id <= %s", (table, through))
        gone = False
        if row is not None and row[0] == DRAINING:
            cur.execute("SELECT 1 FROM zonesync.parked_events WHERE table_name = %s LIMIT 1", (table,))
            if cur.fetchone() is None:
                cur.execute("DELETE FROM zonesync.table_holds WHERE table_name = %s", (table,))
                gone = True
    conn.commit()
    return gone


def hold(conn, table: str, detail: str, park: str = ALL) -> None:
    """Step 1: the table held (again: a draining hold goes back to held, its parked events
    kept), with why and what it parks (MISFITS or ALL)."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO zonesync.table_holds (table_name, status, detail, park) VALUES (%s, %s, %s, %s) "
            "ON DUPLICATE KEY UPDATE status = VALUES(status), detail = VALUES(detail), park = VALUES(park), "
            "resumed_at = NULL",
            (table, HELD, detail[:2000], park),
        )
    conn.commit()


def holds(conn, count: bool = True) -> dict[str, tuple[str, str, object, int]]:
    """table -> (status, detail, since, events parked: -1 unless `count`)."""
    parked = "(SELECT COUNT(*) FROM zonesync.parked_events p WHERE p.table_name = h.table_name)" if count else "-1"
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT h.table_name, h.status, h.detail, h.since, {parked} "
                "FROM zonesync.table_holds h ORDER BY h.table_name"
            )
            rows = cur.fetchall()
    except pymysql.err.ProgrammingError as exc:
        if exc.args[0] != NO_SUCH_TABLE:
            raise
        rows = ()  # a zone whose bookkeeping predates holds: none
    conn.commit()
    return {t: (status, detail, since, int(parked)) for t, status, detail, since, parked in rows}


def resume(conn, table: str) -> bool:
    """Step 3: a held table set draining; False when it is not held."""
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE zonesync.table_holds SET status = %s, resumed_at = CURRENT_TIMESTAMP(6) "
            "WHERE table_name = %s AND status = %s",
            (DRAINING, table, HELD),
        )
        done = cur.rowcount == 1
    conn.commit()
    return done


def target_columns(conn, tables: list[str]) -> dict[str, dict[str, bool]]:
    """table -> {column: whether an event's row must give it a value (NOT NULL, no default,
    not generated, not auto-increment, not one of the bookkeeping columns the writer sets
    itself)} in the connection's database."""
    if not tables:
        return {}
    marks = ", ".join(["%s"] * len(tables))
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME, COLUMN_NAME, IS_NULLABLE = 'NO' AND COLUMN_DEFAULT IS NULL "
            "AND EXTRA NOT LIKE '%%auto_increment%%' AND EXTRA NOT LIKE '%%GENERATED%%' "
            f"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({marks})",
            tables,
        )
        rows = cur.fetchall()
    out: dict[str, dict[str, bool]] = {}
    for table, column, required in rows:
        out.setdefault(table, {})[column] = bool(required) and not column.startswith("_zs_")
    return out


def diagnose(conn, zone: str, changes, message: str) -> SchemaMismatch:
    """Which tables of a refused batch disagree with their events, and how: the events'
    columns against the target's (a column the target lacks; one it requires that the
    events lack), else the tables whose events carry the column the server named (a value
    that does not fit: retyped), else every table of the batch with the server's words."""
    carried: dict[str, set[str]] = {}
    sources: dict[str, set[str]] = {}
    for source, events in changes:
        for e in events:
            cols = carried.setdefault(e.table, set())
            sources.setdefault(e.table, set()).add(source)
            for image in (e.new, e.old):
                if image is not None:
                    cols.update(image)
    here = target_columns(conn, sorted(carried))
    found: dict[str, str] = {}
    for table, cols in carried.items():
        have = here.get(table)
        if have is None:
            continue  # missing altogether: TableMissing's case
        from_ = "/".join(sorted(sources[table]))
        extra = sorted(cols - have.keys())
        needed = sorted(c for c, required in have.items() if required and c not in cols)
        parts = []
        if extra:
            parts.append(f"zone {from_}'s events carry column(s) {', '.join(extra)} that {table} lacks in zone {zone} "
                         "(added at the source, or dropped or renamed here)")  # fmt: skip
        if needed:
            parts.append(f"{table} in zone {zone} requires column(s) {', '.join(needed)} that zone {from_}'s events "
                         "lack (dropped or renamed at the source, or added here without a default)")  # fmt: skip
        if parts:
            found[table] = "; ".join(parts)
    misfits = set(found)
    if not found:
        named = _COLUMN_IN_MESSAGE.search(message)
        column = re.findall(r"[`']([^`']+)[`']", named.group(1))[-1] if named else None
        for table, cols in carried.items():
            if column is not None and column in cols and table in here:
                found[table] = (f"a value of column {column} from zone {'/'.join(sorted(sources[table]))} does not fit "
                                f"{table} in zone {zone} (its type differs?): {message}")  # fmt: skip
    if not found:
        found = {table: f"zone {zone} refused its events: {message}" for table in carried if table in here}
    return SchemaMismatch(found, misfits)


def key_mismatch(table: str, zone: str, event_key: list[str], target_key: list[str]) -> SchemaMismatch:
    return SchemaMismatch(
        {
            table: f"events for {table} are keyed by ({', '.join(event_key)}) but its primary key in zone {zone} is "
            f"({', '.join(target_key)}): the key was changed on one side"
        },
        {table},
    )
