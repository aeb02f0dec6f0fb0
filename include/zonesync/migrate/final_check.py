"""Inside the stop-write window, just before the flip: do the source and the target hold
the same rows of the locating entities? Per table, a count and a checksum of the LEs'
rows, each zone computing its own (one aggregate pushed down per table and zone: the
consistency check's row hash, check/sql.py, over the rows its entity predicate selects).

Writes of the LEs are stopped and the target applied the source up to P, so the two must
agree exactly; a table that differs fails the step and the migration rolls back, naming
the table and both zones' numbers (which rows differ: `zonesync check --zones a,b` or the
DAG's verify, which compares rows). This is pt-table-checksum's comparison of one
entity's rows, cheap enough to run with writes stopped: it reads the rows an index on the
entity column finds, not the table (the full row-by-row comparison ran before the stop,
in the DAG's verify). Every connection reads TIMESTAMPs under time_zone '+00:00'.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from zonesync.check.request import entity_tables
from zonesync.check.sql import chunk_checksum, entity_predicate
from zonesync.migrate.resident import key_of
from zonesync.rules.model import RuleSet
from zonesync.sql_names import quote as q


def _columns(cur, table: str) -> tuple[list[tuple[str, str]], set[str]]:
    cur.execute("SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (table,))  # fmt: skip
    rows = cur.fetchall()
    return [(c, t.lower()) for c, t, _ in rows], {c for c, _, n in rows if n == "YES"}


def source_keyed(conn, table: str, columns: list[tuple[str, str]], run_id: str) -> str:
    """The target's rows of a replace_key table under the keys they had in the source (the
    run's key map, apply/batch/replaced_keys.py), so both zones hash the same rows alike; a
    row the map does not know gets a key no source row has (-1 - its own), and differs."""
    (key,) = key_of(conn, table)
    rest = ", ".join(f"n.{q(c)}" for c, _ in columns if c != key)
    return (f"SELECT COALESCE(m.source_key, -1 - CAST(n.{q(key)} AS SIGNED)) AS {q(key)}, {rest} FROM {q(table)} n "
            f"LEFT JOIN zonesync.key_map m ON m.run_id = {conn.escape(run_id)} AND m.table_name = "
            f"{conn.escape(table)} AND m.target_key = n.{q(key)}")  # fmt: skip


def zone_sums(conn, specs: list, entities: dict[str, list[str]], zone_ids: list[int],
              replaced: tuple[set[str], str] | None = None) -> dict[str, tuple]:  # fmt: skip
    """{table: (rows, checksum, columns)} of the LEs' rows in one zone (its own aggregate).
    `replaced` (the target of a run moving replace_key tables): (those tables, the run id)."""
    out = {}
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        for spec in specs:
            columns, nullable = _columns(cur, spec.name)
            if not columns:
                out[spec.name] = (None, None, ())
                continue
            relation = None
            if replaced is not None and spec.name in replaced[0]:
                relation = source_keyed(conn, spec.name, columns, replaced[1])
            sql = chunk_checksum(spec.name, columns, [], None, None, zone_ids, nullable,
                                 where=entity_predicate(spec, entities), relation=relation)  # fmt: skip
            cur.execute(sql)
            count, crc, _, _ = cur.fetchone()
            out[spec.name] = (int(count), int(crc), tuple(sorted(columns)))
    conn.commit()
    return out


def compare(rules: RuleSet, entities: dict[str, list[str]], zones: tuple[str, str], zone_ids: list[int],
            zone_conn: Callable, run_id: str = "") -> tuple[dict, list[str]]:  # fmt: skip
    """({table: {zone: rows}}, one line per table that differs) between the two zones, for
    the rows of `entities` ({le_type: [le_id, ...]}); the target's rows of replace_key
    tables under their source keys, by the key map of `run_id`."""
    specs = [rules.tables[name] for name in entity_tables(rules.tables, set(entities))]
    replaced = ({s.name for s in specs if s.replace_key}, run_id)

    def sums_of(zone: str) -> dict:
        conn = zone_conn(zone)
        try:
            return zone_sums(conn, specs, entities, zone_ids, replaced if zone == zones[1] else None)
        finally:
            conn.close()

    # both zones at once: the window waits for the slower one, not for the two in turn
    with ThreadPoolExecutor(max_workers=len(zones)) as pool:
        sums = dict(zip(zones, pool.map(sums_of, zones), strict=True))
    source, target = zones
    counts, differ = {}, []
    for spec in specs:
        a, b = sums[source][spec.name], sums[target][spec.name]
        counts[spec.name] = {source: a[0], target: b[0]}
        if a[0] is None or b[0] is None:
            differ.append(f"{spec.name} is missing in zone {source if a[0] is None else target}")
        elif a[2] != b[2]:
            differ.append(f"{spec.name}'s columns differ between {source} and {target}")
        elif a[:2] != b[:2]:
            differ.append(f"{spec.name}: {source} {a[0]} rows (checksum {a[1]}), "
                          f"{target} {b[0]} rows (checksum {b[1]})")  # fmt: skip
    return counts, differ
