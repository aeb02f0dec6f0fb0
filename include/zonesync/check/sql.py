"""The consistency check's SQL: what each zone computes itself (pure text, no connection).

Every zone hashes each row the same way, so two zones agree on a chunk's checksum
exactly when they hold the same rows:

- every column by name, in name order (column order in the table does not matter), as
  CONCAT_WS renders it: numbers and DECIMALs as their text (a DECIMAL with its scale),
  strings as they are (trailing spaces of a VARCHAR count), binary columns (BINARY,
  VARBINARY, BLOB, BIT) byte for byte (the concatenation is then binary: no character
  set conversion can make two different bytes agree), TIMESTAMPs under the session's
  time_zone '+00:00' (set by every connection of the check: the same instant
  everywhere), DATETIMEs as the same wall time;
- NULL marked apart from every value: CONCAT_WS skips NULLs, so a bitmap of which
  nullable columns are NULL joins the row (pt-table-checksum does the same), and NULL
  never equals '' or '\\N'.

No CAST per column: the server renders each value once, inside the concatenation (40%
more rows per second than casting each column to CHAR first, measured on 2M rows).

A chunk's checksum is the row count and BIT_XOR of the rows' CRC32s over a key range
(pt-table-checksum's default): two numbers per chunk and zone leave the databases.
Keys are unique, so no two rows of a chunk cancel out; two different rows agree with
chance 2^-32, and then the row count or another row usually differs too.

For the row diff, each column is also rendered as text for the report (`canonical`:
binary as HEX, the rest CAST AS CHAR).
"""

from __future__ import annotations

from zonesync.copy.chunks import predicate, q

BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"})
BOOKKEEPING = ("_zs_origin", "_zs_version")


def canonical(column: str, data_type: str) -> str:
    """One column rendered as text, the same in every zone (see above)."""
    if data_type.lower() in BINARY_TYPES:
        return f"HEX({q(column)})"
    return f"CAST({q(column)} AS CHAR)"


def row_hash(columns: list[tuple[str, str]], nullable: set[str] | None = None) -> str:
    """CRC32 of a row: every column as CONCAT_WS renders it, and the NULL bitmap of the
    `nullable` columns (None: every column may be NULL)."""
    ordered = sorted(columns)
    values = ", ".join(q(c) for c, _ in ordered)
    marked = [c for c, _ in ordered if nullable is None or c in nullable]
    if not marked:
        return f"CRC32(CONCAT_WS('#', {values}))"
    nulls = ", ".join(f"ISNULL({q(c)})" for c in marked)
    return f"CRC32(CONCAT_WS('#', {values}, CONCAT({nulls})))"


def chunk_checksum(table: str, columns: list[tuple[str, str]], key: list[str], lo, hi, zone_ids: list[int],
                   nullable: set[str] | None = None, where: str | None = None,
                   relation: str | None = None) -> str:  # fmt: skip
    """One chunk's numbers in one zone: rows, BIT_XOR of row CRCs, and the bookkeeping
    facts the Great Expectations suite checks (the smallest _zs_version, how many rows
    carry an origin that is no zone's id: counted, not summed, as SUM adds up in DECIMAL,
    8% of the query's time). A primary key column is never NULL (InnoDB). `where`: only
    the rows it is true for (a restricted check, see below). `relation`: a derived table read
    in the table's place, under its name (a migration's final check of replaced keys)."""
    names = {c for c, _ in columns}
    missing = [c for c in BOOKKEEPING if c not in names]
    if missing:
        raise ValueError(f"{table} lacks the bookkeeping columns {', '.join(missing)} (docs/table-contract.md)")
    ids = ", ".join(str(int(i)) for i in sorted(zone_ids)) or "NULL"
    source = f"({relation}) AS {q(table)}" if relation else q(table)
    return (
        f"SELECT COUNT(*), COALESCE(BIT_XOR({row_hash(columns, nullable)}), 0), MIN(`_zs_version`), "
        f"COUNT(IF(`_zs_origin` NOT IN ({ids}), 1, NULL)) FROM {source} WHERE {predicate(key, lo, hi)}"
        f"{f' AND {where}' if where else ''}"
    )


def rows_relation(table: str, columns: list[tuple[str, str]], key: list[str],
                  nullable: set[str] | None = None, where: str | None = None) -> str:  # fmt: skip
    """A derived table of the table's rows for Spark's JDBC reader: the key columns as
    they are, the bookkeeping columns, the row's CRC as `_zs_hash`, and every column's
    canonical text as `c_<name>`. A chunk predicate on the key applied to it reaches the
    table's primary key (the server merges the derived table into the outer query)."""
    texts = ", ".join(f"{canonical(c, t)} AS {q('c_' + c)}" for c, t in sorted(columns))
    keys = ", ".join(q(c) for c in key)
    return (
        f"(SELECT {keys}, `_zs_version` AS `_v`, `_zs_origin` AS `_o`, {row_hash(columns, nullable)} AS `_zs_hash`, "
        f"{texts} FROM {q(table)}{f' WHERE {where}' if where else ''}) AS r"
    )


# -- the rows of some ZSIDs --------------------------------------------------------
# `zsid_predicate(spec, zsid_min, spans)` is true for exactly the rows whose ZSID, as
# rules.extract.zsid_of computes it, falls in one of `spans` ([(lo, hi)], inclusive), and
# false for a row whose ZSID is unknown (NULL in the column, a value the map or the
# ranges do not list): such a row belongs to no ZSID, as the guard sees it. The switch's
# verify (a check restricted to the moved ZSIDs) uses it.
#
# - modulo: Python's `%` is never negative for a positive modulus, SQL's MOD takes the
#   dividend's sign: MOD(MOD(col, n) + n, n) is Python's value;
# - map: the column's text (CAST AS CHAR, as `str(value)` keys the map) among the keys
#   whose ZSID is in a span;
# - ranges: the column between the bounds of every range whose ZSID is in a span.


def _in_spans(zsid: int, spans) -> bool:
    return any(lo <= zsid <= hi for lo, hi in spans)


def _text(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


def entity_predicate(spec, entities: dict[str, list[str]]) -> str:
    """SQL true for the rows of `spec`'s table whose declared entity is one of `entities`
    ({type: [id, ...]}); FALSE when the table declares no entity of those types. The ids
    compare as the column's type does (a numeric column takes '7' as 7: its index serves)."""
    if spec.entity is None or not entities.get(spec.entity.type):
        return "FALSE"
    col = q(spec.entity.column)
    return f"({col} IS NOT NULL AND {col} IN ({', '.join(_text(i) for i in entities[spec.entity.type])}))"


def zsid_predicate(spec, zsid_min: int, spans: list[tuple[int, int]]) -> str:
    """SQL true for the rows of `spec`'s table whose ZSID is in `spans` (see above)."""
    col = q(spec.column)
    if spec.function == "modulo":
        n = int(spec.buckets or 1)
        zsid = f"({int(zsid_min)} + MOD(MOD({col}, {n}) + {n}, {n}))"
        parts = [f"{zsid} BETWEEN {int(lo)} AND {int(hi)}" for lo, hi in spans]
    elif spec.function == "map":
        keys = sorted(k for k, z in (spec.mapping or {}).items() if _in_spans(int(z), spans))
        parts = [f"CAST({col} AS CHAR) IN ({', '.join(_text(k) for k in keys)})"] if keys else []
    else:
        parts = [f"{col} BETWEEN {int(lo)} AND {int(hi)}" for lo, hi, z in spec.ranges if _in_spans(int(z), spans)]
    if not parts:
        return "FALSE"
    return f"({col} IS NOT NULL AND ({' OR '.join(parts)}))"
