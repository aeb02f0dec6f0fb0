"""A resident table with unique keys besides its primary key moves with its tenant
(docs/migration.md, "Unique keys"): each such key holds the entity column, so a copied row
can meet only a row of its own tenant through one; the stock copy leaves such a meeting to
the stream, which applies the source's changes in order. NULLs in a unique key (S004-10):
every row read and written once."""

from __future__ import annotations

import time

import pytest

from tests.integration.migrate.test_resident_tables import _applied_everywhere, _ctx, _stock, _verify
from tests.support.background import wait_until
from tests.support.replication import ZONES
from tests.support.resident import note_ids
from zonesync.migrate import resident, steps

pytestmark = pytest.mark.integration

UNIQUE = (
    "ALTER TABLE notes ADD COLUMN slug VARCHAR(32) NULL, ADD COLUMN a INT NULL, ADD COLUMN b INT NULL, "
    "ADD UNIQUE KEY uk_notes_slug (tenant_id, slug), ADD UNIQUE KEY uk_notes_ab (tenant_id, a, b)"
)


def _each_zone(zones, sql: str) -> None:
    for z in ZONES:
        with zones[z].connect("zonesync_app") as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(sql)


def _rows(inst, tenant: int) -> list[tuple]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute(f"SELECT note_id, body, slug, a, b FROM notes WHERE tenant_id = {int(tenant)} ORDER BY 1")
        return list(cur.fetchall())


def _five_nulls(inst) -> int:
    """Tenant 7's rows with (a, b) = (1, NULL): five at the source."""
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM notes WHERE tenant_id = 7 AND a = 1 AND b IS NULL")
        return int(cur.fetchone()[0])


@pytest.mark.usefixtures("notes", "cluster")
def test_a_tenant_s_rows_with_unique_keys_move_once_each_and_a_value_moving_between_rows_lands_by_the_stream(
    guard_env, zones, meta, tmp_path
):
    """Tenant 7's 300 notes (slugs unique per tenant; five rows with (a, b) = (1, NULL)) move
    from a to b. Mid-copy, note 1 gives its slug to a new note 50,000 while b's applier is
    held: the stock copy reads the new note and meets note 1's older copy in b holding the
    slug; it leaves it (no error, note 1 not overwritten) and the stream, let go, moves note
    1 off the slug and brings the new note. b ends with exactly a's rows, the five
    (1, NULL) rows once each, tenant 8's note with the same slug untouched in a."""
    _each_zone(zones, UNIQUE)
    ga = guard_env("a")
    with zones["a"].connect("zonesync_app") as conn, conn.cursor() as cur:
        now_us = time.time_ns() // 1000
        rows = [(n, 7, f"s{n}", 1 if n <= 5 else n, None if n <= 5 or n % 2 else n, now_us) for n in range(1, 301)]
        rows.append((500, 8, "s1", 1, None, now_us))
        cur.executemany("INSERT INTO notes (note_id, tenant_id, body, slug, a, b, _zs_origin, _zs_version) "
                        "VALUES (%s, %s, 'x', %s, %s, %s, 1, %s)", rows)  # fmt: skip
        conn.commit()
    ctx = _ctx(zones, meta, "uk-move-7")
    steps.preflight(ctx)
    started = steps.admit(ctx)
    first = _stock(ctx, zones, tmp_path, started, chunk_rows=100, stop_after=1)
    assert first["notes"]["done"] == 1, first
    assert set(note_ids(zones["b"], 7)) == set(range(1, 101))  # note 1 in b, with slug s1

    held = zones["b"].connect("zonesync_app")  # b's appliers wait at the admits' head (ResidentGate.kept)
    try:
        with held.cursor() as cur:
            cur.execute("START TRANSACTION")
            cur.execute("SELECT version FROM zonesync.resident_admits_head WHERE id = 1 FOR UPDATE")
        with ga.transaction() as tx:
            tx.update("notes", {"note_id": 1}, {"slug": "moved-1"})
        with ga.transaction() as tx:
            tx.insert("notes", {"note_id": 50_000, "tenant_id": 7, "body": "y", "slug": "s1", "a": 2, "b": 2})
        rest = _stock(ctx, zones, tmp_path, started, chunk_rows=100)
        assert rest["notes"]["done"] == rest["notes"]["chunks"], rest
        in_b = dict((r[0], r) for r in _rows(zones["b"], 7))
        assert 50_000 not in in_b and in_b[1] == (1, "x", "s1", 1, None), in_b.get(1)  # left, nothing overwritten
        assert len(in_b) == 300
        with zones["b"].connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT SUM(rows_read) FROM zonesync.copy_chunks WHERE run_id = %s", (started["run_id"],))
            assert cur.fetchone()[0] == 301  # note 50,000 read too, and left
    finally:
        held.rollback()
        held.close()
    _applied_everywhere(meta, zones)
    assert _rows(zones["b"], 7) == _rows(zones["a"], 7)
    report = _verify(ctx, zones, tmp_path)
    assert report["differ"] == 0, report
    steps.stop_write(ctx)
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    counts = steps.final_check(ctx)
    assert counts["notes"]["a"] == counts["notes"]["b"] == 301, counts
    steps.flip(ctx)
    assert steps.lift(ctx).status == "succeeded"
    expected = _rows(zones["a"], 7)
    assert steps.release(ctx) == {"notes": 301}
    assert _rows(zones["b"], 7) == expected and _five_nulls(zones["b"]) == 5
    assert note_ids(zones["a"]) == {500} and note_ids(zones["c"]) == set()
    with zones["b"].connect("zonesync_app") as conn:
        assert not resident.admitted(conn, "uk-move-7")
