"""The chunk plan against a real zone: a large table of dense integer keys planned by
arithmetic (no index walk), a sparse one walked; either way every chunk holds at most
`chunk_rows` rows and the chunks tile the key space."""

from __future__ import annotations

import pytest

from zonesync.copy import chunks

pytestmark = pytest.mark.integration

ROWS = 1_200_000


def _table(inst, name: str, key_expr: str, gaps: str | None = None):
    conn = inst.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v INT NOT NULL)")
        cur.execute(f"INSERT INTO {name} SELECT {key_expr}, seq % 7 FROM seq_1_to_{ROWS}")
        if gaps:
            cur.execute(f"DELETE FROM {name} WHERE {gaps}")
        cur.execute(f"ANALYZE TABLE {name}")
        cur.fetchall()
    conn.commit()
    return conn


def _per_chunk(conn, name: str, bounds: list[list[int]]) -> list[int]:
    edges = [None, *bounds, None]
    out = []
    with conn.cursor() as cur:
        for lo, hi in zip(edges, edges[1:], strict=False):
            cur.execute(f"SELECT COUNT(*) FROM {name} WHERE {chunks.predicate(['id'], lo, hi)}")
            out.append(cur.fetchone()[0])
    conn.commit()
    return out


def test_dense_keys_are_planned_by_arithmetic_and_sparse_ones_walked(zones):
    conn = _table(zones["a"], "plan_dense", "seq", gaps="id BETWEEN 250001 AND 260000")
    try:
        assert chunks.dense_keys(conn, "plan_dense", "id") == (1, ROWS)
        bounds = list(chunks.bounds_after(conn, "plan_dense", ["id"], 100_000, None))
        assert bounds == [[b] for b in range(100_000, ROWS, 100_000)]  # every 100k values
        counts = _per_chunk(conn, "plan_dense", bounds)
        assert sum(counts) == ROWS - 10_000 and max(counts) <= 100_000 and counts[2] == 90_000  # the gap's chunk
        # a plan resumed after a stored chunk goes on from its bound
        assert list(chunks.bounds_after(conn, "plan_dense", ["id"], 100_000, [1_000_000])) == [[1_100_000]]
    finally:
        conn.close()

    conn = _table(zones["a"], "plan_sparse", "seq * 3")
    try:
        assert chunks.dense_keys(conn, "plan_sparse", "id") is None  # 3.6M values for 1.2M rows
        bounds = list(chunks.bounds_after(conn, "plan_sparse", ["id"], 100_000, None))
        assert bounds[:2] == [[300_000], [600_000]]  # the walk: the 100,000th key, then the 200,000th
        counts = _per_chunk(conn, "plan_sparse", bounds)
        assert counts[:-1] == [100_000] * (len(counts) - 1) and sum(counts) == ROWS
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS plan_dense")
            cur.execute("DROP TABLE IF EXISTS plan_sparse")
        conn.close()
