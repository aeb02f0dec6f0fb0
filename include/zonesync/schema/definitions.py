"""The replicated tables' definitions in each zone, and how they differ.

What matters to the appliers (apply/batch/table_holds.py) is what `diff` reports: a
column one zone has and another lacks, a column's type, nullability or default, and the
primary key. Column order does not matter (events are applied by name) and is not
reported; neither are secondary indexes (a unique key is the exception: a value unique
in one zone and not in another is a difference the appliers meet).
"""

from __future__ import annotations

from typing import NamedTuple


class Column(NamedTuple):
    type: str  # COLUMN_TYPE, as the server shows it: decimal(10,2), varchar(64), ...
    nullable: bool
    default: str | None

    def describe(self) -> str:
        default = f" DEFAULT {self.default}" if self.default is not None else ""
        return f"{self.type} {'NULL' if self.nullable else 'NOT NULL'}{default}"


class Table(NamedTuple):
    columns: dict[str, Column]
    primary_key: tuple[str, ...]
    unique_keys: frozenset[tuple[str, ...]]


def read(conn, tables: list[str] | None = None) -> dict[str, Table]:
    """The base tables of the connection's database (or only `tables`), by name."""
    where, args = "", []
    if tables:
        where = f" AND TABLE_NAME IN ({', '.join(['%s'] * len(tables))})"
        args = list(tables)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE = 'YES', c.COLUMN_DEFAULT "
            "FROM information_schema.COLUMNS c JOIN information_schema.TABLES t "
            "ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME AND t.TABLE_TYPE = 'BASE TABLE' "
            f"WHERE c.TABLE_SCHEMA = DATABASE(){where.replace('TABLE_NAME', 'c.TABLE_NAME')} "
            "ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION",
            args,
        )
        columns = cur.fetchall()
        cur.execute(
            "SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
            f"WHERE TABLE_SCHEMA = DATABASE(){where} ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
            args,
        )
        indexes = cur.fetchall()
    conn.commit()
    cols: dict[str, dict[str, Column]] = {}
    for table, name, type_, nullable, default in columns:
        cols.setdefault(table, {})[name] = Column(type_, bool(nullable), default)
    keys: dict[str, dict[str, list[str]]] = {}
    unique: dict[str, set[str]] = {}
    for table, index, non_unique, column in indexes:
        keys.setdefault(table, {}).setdefault(index, []).append(column)
        if not int(non_unique):
            unique.setdefault(table, set()).add(index)
    out = {}
    for table, columns_of in cols.items():
        indexes_of = keys.get(table, {})
        out[table] = Table(
            columns_of,
            tuple(indexes_of.get("PRIMARY", ())),
            frozenset(tuple(indexes_of[i]) for i in unique.get(table, ()) if i != "PRIMARY"),
        )
    return out


def _zones(zones: list[str]) -> str:
    return ", ".join(zones)


def diff(by_zone: dict[str, dict[str, Table]]) -> list[str]:
    """One line per difference, table by table: what each group of zones has."""
    lines: list[str] = []
    zones = list(by_zone)
    for table in sorted({t for tables in by_zone.values() for t in tables}):
        have = {z: by_zone[z].get(table) for z in zones}
        missing = [z for z, t in have.items() if t is None]
        if missing:
            present = [z for z in zones if z not in missing]
            lines.append(f"{table}: missing in zone(s) {_zones(missing)} (present in {_zones(present)})")
        present = {z: t for z, t in have.items() if t is not None}
        if len(present) < 2:
            continue
        for column in sorted({c for t in present.values() for c in t.columns}):
            seen = {z: t.columns.get(column) for z, t in present.items()}
            lines += _grouped(f"{table}.{column}", seen, lambda c: c.describe() if c else "absent")
        lines += _grouped(f"{table} primary key", {z: t.primary_key for z, t in present.items()},
                          lambda k: f"({', '.join(k)})" if k else "none")  # fmt: skip
        lines += _grouped(f"{table} unique keys", {z: t.unique_keys for z, t in present.items()},
                          lambda u: ", ".join(f"({', '.join(k)})" for k in sorted(u)) or "none")  # fmt: skip
    return lines


def _grouped(what: str, seen: dict, show) -> list[str]:
    """`what: A in zones a, b; B in zone c`, when the zones do not all agree."""
    groups: dict[str, list[str]] = {}
    for zone, value in seen.items():
        groups.setdefault(show(value), []).append(zone)
    if len(groups) < 2:
        return []
    return [f"{what}: " + "; ".join(f"{shown} in {_zones(zs)}" for shown, zs in groups.items())]


def to_json(table: Table) -> dict:
    """A definition as JSON (an XCom between the schema_change DAG's tasks)."""
    return {
        "columns": {name: list(col) for name, col in table.columns.items()},
        "primary_key": list(table.primary_key),
        "unique_keys": sorted(list(k) for k in table.unique_keys),
    }


def from_json(doc: dict) -> Table:
    return Table(
        {name: Column(*col) for name, col in doc["columns"].items()},
        tuple(doc["primary_key"]),
        frozenset(tuple(k) for k in doc["unique_keys"]),
    )
