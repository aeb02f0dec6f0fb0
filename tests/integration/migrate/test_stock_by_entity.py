"""A migration's stock copy and verify cost what the moving tenant holds, not what its
table holds (docs/migration.md, "Resident tables"): chunks are planned over the tenant's
rows through the entity column's index, and each chunk's statements read and lock only
the tenant's rows, at the source and at the target."""

from __future__ import annotations

import time

import pytest

from tests.integration.migrate.test_resident_tables import _ctx, _stock, _verify
from tests.support.resident import note_ids
from zonesync.check.sql import entity_predicate
from zonesync.copy import chunks, merge
from zonesync.migrate import resident, steps
from zonesync.migrate.request import MigrationRefused

pytestmark = pytest.mark.integration

TENANT_7 = range(25, 5_025, 25)  # 200 keys among tenant 8's 5,000
TENANT_8 = [k for k in range(1, 5_201) if k % 25]


def _explain(conn, sql: str) -> set[str]:
    """The indexes the server's plan for `sql` uses."""
    with conn.cursor() as cur:
        cur.execute("EXPLAIN " + sql)
        names = [d[0] for d in cur.description]
        return {row[names.index("key")] for row in cur.fetchall()}


@pytest.mark.usefixtures("notes", "cluster")
def test_a_small_tenant_among_a_large_one_is_planned_read_and_locked_by_its_own_rows(guard_env, zones, meta,
                                                                                     tmp_path):  # fmt: skip
    """Tenant 7's 200 notes spread among tenant 8's 5,000 (keys 25, 50, ...): the stock copy
    plans 3 chunks of 100 (a walk of the table's keys would plan 53), each chunk's read at
    the source and locking read at the target go through the tenant column's index, and b
    ends with tenant 7's notes and none of tenant 8's; the verify's check plans the same way."""
    guard_env("a")
    with zones["a"].connect("zonesync_app") as conn, conn.cursor() as cur:
        now_us = time.time_ns() // 1000
        insert = "INSERT INTO notes (note_id, tenant_id, body, _zs_origin, _zs_version) VALUES (%s, %s, 'x', 1, %s)"
        cur.executemany(insert, [(k, 7, now_us) for k in TENANT_7] + [(k, 8, now_us) for k in TENANT_8])
        cur.execute("ANALYZE TABLE notes")
        cur.fetchall()
        conn.commit()
    with zones["b"].connect("zonesync_app") as conn, conn.cursor() as cur:  # b's own tenant's notes
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.executemany(insert, [(k, 9, now_us) for k in range(20_001, 25_001)])
        cur.execute("ANALYZE TABLE notes")
        cur.fetchall()
        conn.commit()
    where = entity_predicate(steps.rules_of(_ctx(zones, meta, "x")).tables["notes"], {"tenant": ["7"]})
    with zones["a"].connect("zonesync_app") as conn:
        bounds = list(chunks.bounds_after(conn, "notes", ["note_id"], 100, None, where))
        assert bounds == [[TENANT_7[99]], [TENANT_7[199]]], bounds  # the tenant's 100th and 200th keys
        cols = ["note_id", "tenant_id", "body", "written_at", "seen_at", "_zs_origin", "_zs_version"]
        read = merge.select_statement("zonesync_app", "notes", cols, ["note_id"], [TENANT_7[99]], None, where)
        assert _explain(conn, read) == {"idx_notes_tenant"}
    with zones["b"].connect("zonesync_app") as conn:
        lock = merge.range_statement("zonesync_app", "notes", ["note_id"], [TENANT_7[99]], None, where)
        assert _explain(conn, lock) == {"idx_notes_tenant"}
    ctx = _ctx(zones, meta, "scale-7")
    steps.preflight(ctx)
    result = _stock(ctx, zones, tmp_path, steps.admit(ctx), chunk_rows=100)
    assert result["notes"]["chunks"] == 3 and result["notes"]["done"] == 3, result
    assert note_ids(zones["b"], 7) == set(TENANT_7) and not note_ids(zones["b"], 8)
    assert _verify(ctx, zones, tmp_path)["differ"] == 0
    steps.rollback(ctx, "test")
    assert note_ids(zones["b"], 7) == set() and len(note_ids(zones["b"], 9)) == 5_000


@pytest.mark.usefixtures("notes")
def test_a_resident_table_without_an_index_on_its_entity_column_is_refused(guard_env, zones, meta):
    """Without an index that starts with the entity column, planning and every chunk's
    statements would scan the table (and the target's locking reads lock other tenants'
    rows): admit refuses in one line naming the table, the zone and the index to add."""
    guard_env("a")
    with zones["a"].connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("ALTER TABLE notes DROP INDEX idx_notes_tenant")
    ctx = _ctx(zones, meta, "noindex-7")
    steps.preflight(ctx)
    with pytest.raises(MigrationRefused, match=r"^tables: notes has no index that starts with its entity column "
                       r"tenant_id in zone a: .*CREATE INDEX idx_notes_tenant_id ON notes \(tenant_id\)"):  # fmt: skip
        steps.admit(ctx)
    with zones["b"].connect("zonesync_app") as conn:
        assert not resident.admitted(conn, "noindex-7")
    steps.rollback(ctx, "test")
