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


def chunk_rows(conn, table: str, key_cols: list[str], chunk: dict) -> dict[str, tuple[int, int]]:
    """{key text: (_zs_version, row CRC32)} of one chunk's rows, for a row-by-row look."""
    from zonesync.events import pk_text

    cols = table_columns(conn, table)
    keys = ", ".join(q(c) for c in key_cols)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            f"SELECT {keys}, `_zs_version`, {row_crc(cols)} FROM {q(table)} "
            f"WHERE {predicate(key_cols, chunk['lo'], chunk['hi'])}"
        )
        out = {
            pk_text(dict(zip(key_cols, (int(v) for v in r[: len(key_cols)]), strict=True))): (int(r[-2]), int(r[-1]))
            for r in cur.fetchall()
        }
    conn.commit()
    return out


def recently_deleted(conn, table: str, since_us: int) -> set[str]:
    """Key texts of the table's rows deleted in this zone (by its guard or its appliers)
    after `since_us` (µs since the epoch, by the zone's clock). By when, not by version:
    a delete's tombstone carries the deleted row's version + 1, which says nothing of
    when it happened."""
    import datetime as dt

    since = dt.datetime.fromtimestamp(since_us / 1_000_000, dt.UTC).replace(tzinfo=None)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT pk FROM zonesync.tombstones WHERE table_name = %s AND deleted_at > %s", (table, since))
        out = {pk for (pk,) in cur.fetchall()}
    conn.commit()
    return out


def real_differences(src: dict, dst: dict, src_deleted: set, dst_deleted: set, cut: int) -> list[str]:
    """Keys whose rows differ for a reason other than a write in flight (pure).

    Both zones applied every zone's writes up to a moment `cut` (µs). A key is in flight
    when either side's row is newer than `cut` (an insert or update after it: their
    versions are the writer's clock), or the side lacking it deleted it after `cut`.
    Anything else that differs is a real difference."""
    out = []
    for key in sorted(set(src) | set(dst)):
        a, b = src.get(key), dst.get(key)
        if a == b:
            continue
        if (a is not None and a[0] > cut) or (b is not None and b[0] > cut):
            continue
        if (a is None and key in src_deleted) or (b is None and key in dst_deleted):
            continue
        out.append(key)
    return out
