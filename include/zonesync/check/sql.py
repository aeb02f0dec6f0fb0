"""The consistency check's SQL: what each zone computes itself (pure text, no connection).

Every zone renders each row the same way before hashing it, so two zones agree on a
chunk's checksum exactly when they hold the same rows:

- every column by name, in name order (column order in the table does not matter);
- a binary column (BINARY, VARBINARY, BLOB, BIT) as HEX(), byte for byte (CAST AS CHAR
  would turn invalid UTF-8 into '?' and let two different bytes agree);
- anything else as CAST(... AS CHAR) under the session's time_zone '+00:00' (set by
  every connection of the check): a TIMESTAMP is the same instant everywhere, a
  DATETIME the same wall time, a DECIMAL shows its scale, trailing spaces of a VARCHAR
  stay;
- NULL marked apart from every value: CONCAT_WS skips NULLs, so a bitmap of which
  columns are NULL joins the row (pt-table-checksum does the same), and NULL never
  equals '' or '\\N'.

A chunk's checksum is the row count and BIT_XOR of the rows' CRC32s over a key range
(pt-table-checksum's default): two numbers per chunk and zone leave the databases.
Keys are unique, so no two rows of a chunk cancel out; two different rows agree with
chance 2^-32, and then the row count or another row usually differs too.
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


def row_hash(columns: list[tuple[str, str]]) -> str:
    """CRC32 of a row: every column's canonical text and the NULL bitmap."""
    ordered = sorted(columns)
    texts = ", ".join(canonical(c, t) for c, t in ordered)
    nulls = ", ".join(f"ISNULL({q(c)})" for c, _ in ordered)
    return f"CRC32(CONCAT_WS('#', {texts}, CONCAT({nulls})))"


def chunk_checksum(table: str, columns: list[tuple[str, str]], key: list[str], lo, hi, zone_ids: list[int]) -> str:
    """One chunk's numbers in one zone: rows, BIT_XOR of row CRCs, and the bookkeeping
    facts the Great Expectations suite checks (the smallest _zs_version, how many rows
    carry an origin that is no zone's id, how many a key column NULL)."""
    names = {c for c, _ in columns}
    missing = [c for c in BOOKKEEPING if c not in names]
    if missing:
        raise ValueError(f"{table} lacks the bookkeeping columns {', '.join(missing)} (docs/table-contract.md)")
    ids = ", ".join(str(int(i)) for i in sorted(zone_ids)) or "NULL"
    null_key = " OR ".join(f"{q(c)} IS NULL" for c in key)
    return (
        f"SELECT COUNT(*), COALESCE(BIT_XOR({row_hash(columns)}), 0), MIN(`_zs_version`), "
        f"COALESCE(SUM(`_zs_origin` NOT IN ({ids})), 0), COALESCE(SUM({null_key}), 0) "
        f"FROM {q(table)} WHERE {predicate(key, lo, hi)}"
    )


def rows_relation(table: str, columns: list[tuple[str, str]], key: list[str]) -> str:
    """A derived table of the table's rows for Spark's JDBC reader: the key columns as
    they are, the bookkeeping columns, the row's CRC as `_zs_hash`, and every column's
    canonical text as `c_<name>`. A chunk predicate on the key applied to it reaches the
    table's primary key (the server merges the derived table into the outer query)."""
    texts = ", ".join(f"{canonical(c, t)} AS {q('c_' + c)}" for c, t in sorted(columns))
    keys = ", ".join(q(c) for c in key)
    return (
        f"(SELECT {keys}, `_zs_version` AS `_v`, `_zs_origin` AS `_o`, {row_hash(columns)} AS `_zs_hash`, {texts} "
        f"FROM {q(table)}) AS r"
    )
