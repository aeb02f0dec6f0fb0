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
from zonesync.rules.model import RuleSet


def _columns(cur, table: str) -> tuple[list[tuple[str, str]], set[str]]:
    cur.execute("SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (table,))  # fmt: skip
    rows = cur.fetchall()
    return [(c, t.lower()) for c, t, _ in rows], {c for c, _, n in rows if n == "YES"}


def zone_sums(conn, specs: list, entities: dict[str, list[str]], zone_ids: list[int]) -> dict[str, tuple]:
    """{table: (rows, checksum, columns)} of the LEs' rows in one zone (its own aggregate)."""
    out = {}
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        for spec in specs:
            columns, nullable = _columns(cur, spec.name)
            if not columns:
                out[spec.name] = (None, None, ())
                continue
            sql = chunk_checksum(spec.name, columns, [], None, None, zone_ids, nullable,
                                 where=entity_predicate(spec, entities))  # fmt: skip
            cur.execute(sql)
            count, crc, _, _ = cur.fetchone()
            out[spec.name] = (int(count), int(crc), tuple(sorted(columns)))
    conn.commit()
    return out


def compare(rules: RuleSet, entities: dict[str, list[str]], zones: tuple[str, str], zone_ids: list[int],
            zone_conn: Callable) -> tuple[dict, list[str]]:  # fmt: skip
    """({table: {zone: rows}}, one line per table that differs) between the two zones, for
    the rows of `entities` ({le_type: [le_id, ...]})."""
    specs = [rules.tables[name] for name in entity_tables(rules.tables, set(entities))]

    def sums_of(zone: str) -> dict:
        conn = zone_conn(zone)
        try:
            return zone_sums(conn, specs, entities, zone_ids)
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
