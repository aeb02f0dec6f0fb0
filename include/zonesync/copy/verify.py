"""Chunk checksums, computed by the zone itself (pt-table-checksum style): per
key-range chunk, the row count and a BIT_XOR of each row's CRC32, so only two
numbers per chunk leave the database."""

from __future__ import annotations

from zonesync.copy.chunks import predicate, q


def row_crc(cols: list[str]) -> str:
    """CRC32 of a row's columns in a stable order (NULLs marked, not skipped)."""
    parts = ", ".join(f"COALESCE(CAST({q(c)} AS CHAR), '\\\\N')" for c in cols)
    return f"CRC32(CONCAT_WS('#', {parts}))"


def table_columns(conn, table: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {q(table)} WHERE 1 = 0")
        return sorted(d[0] for d in cur.description)


def chunk_sums(conn, table: str, key_cols: list[str], plan: list[dict], which: list[int]) -> dict[int, tuple]:
    """{chunk: (rows, checksum)} for the chunks numbered in `which`, one query each."""
    cols = table_columns(conn, table)
    by_no = {c["chunk"]: c for c in plan}
    out = {}
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMPs as UTC text in every zone
        for n in which:
            c = by_no[n]
            cur.execute(
                f"SELECT COUNT(*), COALESCE(BIT_XOR({row_crc(cols)}), 0) FROM {q(table)} "
                f"WHERE {predicate(key_cols, c['lo'], c['hi'])}"
            )
            rows, crc = cur.fetchone()
            out[n] = (int(rows), int(crc))
    conn.commit()
    return out
