"""Replaced keys (seed 004's need-replace-pk, S004-35/38; docs/migration.md, "Replaced
keys"): a `replace_key` resident table keyed by each zone's AUTO_INCREMENT moves with its
tenant under new keys from the target's own counter, through the target's key map; the
stream's later changes, carrying the source's keys, land on the rows those keys became,
never on the target's rows that hold the same keys."""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager

import pytest

from tests.integration.migrate.test_resident_tables import _applied_everywhere, _ctx, _stock, _verify
from tests.support.background import wait_until
from tests.support.replication import ZONES
from tests.support.rules import BASE
from zonesync.copy import replaced_stage
from zonesync.meta.entities import EntityRegistry
from zonesync.meta.store import MetaStore
from zonesync.migrate import resident, steps
from zonesync.migrate.context import MigrationError
from zonesync.rules import parse

pytestmark = pytest.mark.integration

MEMOS_DDL = (
    "CREATE TABLE IF NOT EXISTS memos (memo_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, tenant_id BIGINT NOT NULL, "
    "body VARCHAR(64) NOT NULL, _zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0, "
    "KEY idx_memos_tenant (tenant_id)) ENGINE=InnoDB"
)


def _each_zone(zones, *statements: str) -> None:
    for z in ZONES:
        with zones[z].connect("zonesync_app") as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for sql in statements:
                cur.execute(sql)
            conn.commit()


@contextmanager
def _memos(zones, meta):
    """`memos` (resident, replace_key) empty in every zone, tenants 7 in a and 9 in b."""
    _each_zone(zones, MEMOS_DDL, "DELETE FROM memos", "DELETE FROM zonesync.resident_admits",
               "DELETE FROM zonesync.key_map")  # fmt: skip
    doc = copy.deepcopy(BASE)
    doc["tables"]["memos"] = {"column": "tenant_id", "function": "modulo", "buckets": 1024, "resident": True,
                              "replace_key": True, "entity": {"type": "tenant", "column": "tenant_id"}}  # fmt: skip
    MetaStore(meta).publish_rules(parse(doc), "test: memos resident, keys replaced")
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
    registry = EntityRegistry(meta)
    registry.register_biz("tenant", "7", "a", [("tenant", "7")], "test: tenant 7 in a")
    registry.register_biz("tenant", "9", "b", [("tenant", "9")], "test: tenant 9 in b", new=True)
    try:
        yield
    finally:
        _each_zone(zones, "DROP TABLE IF EXISTS memos", "DELETE FROM zonesync.resident_admits",
                   "DELETE FROM zonesync.key_map")  # fmt: skip
        MetaStore(meta).publish_rules(parse(copy.deepcopy(BASE)), "test: baseline rules")
        meta.run("DELETE FROM migrations")
        meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
        meta.run("DELETE FROM biz_entities WHERE be_type = 'tenant' AND be_id <> '7'")


@pytest.fixture
def memos(guard_env, zones, meta):
    """(after guard_env, which publishes the baseline rules)"""
    with _memos(zones, meta):
        yield


def _load(inst, tenant: int, n: int, prefix: str) -> None:
    """Memos 1..n of a tenant, loaded behind the guard (keys an AUTO_INCREMENT counter of
    this zone alone would give: zones a and b each hold keys 1..n)."""
    with inst.connect("zonesync_app") as conn, conn.cursor() as cur:
        now_us = time.time_ns() // 1000
        rows = [(i, tenant, f"{prefix}{i}", now_us) for i in range(1, n + 1)]
        cur.executemany("INSERT INTO memos (memo_id, tenant_id, body, _zs_origin, _zs_version) "
                        "VALUES (%s, %s, %s, 1, %s)", rows)  # fmt: skip
        conn.commit()


def _memos_of(inst, tenant: int) -> dict[int, str]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT memo_id, body FROM memos WHERE tenant_id = %s", (tenant,))
        return {int(k): b for k, b in cur.fetchall()}


def _key_map(inst, run_id: str) -> dict[int, int | None]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT source_key, target_key FROM zonesync.key_map WHERE run_id = %s", (run_id,))
        return {int(s): (None if t is None else int(t)) for s, t in cur.fetchall()}


def _start(ctx, zones, tmp_path) -> dict:
    """preflight, admit, and the stock cut short after its first chunk (as a killed one is)."""
    steps.preflight(ctx)
    started = steps.admit(ctx)
    assert '"replace_key": "' + ctx.run_id in started["where"], started
    cut = _stock(ctx, zones, tmp_path, started, chunk_rows=100, stop_after=1)
    assert cut["memos"]["done"] == 1 and "merged" not in cut["memos"], cut
    return started


def test_a_tenant_s_rows_move_under_new_keys_and_later_changes_follow_the_key_map(memos, cluster, guard_env, zones,
                                                                                  meta, tmp_path):  # fmt: skip
    """Tenant 7's 300 memos in a and tenant 9's 50 in b hold the same keys 1..50. Tenant 7
    moves to b: its memos take new keys from b's counter; an update, a delete and an insert
    of its memos while the stock is staged land through the map, the stock's older copies
    of them stay out; after the stock, an update of memo 1 (a's key, tenant 9's key in b)
    lands on tenant 7's row (S004-38). The final check compares through the map; after the
    flip, b holds tenant 7's memos as a held them and tenant 9's untouched."""
    _load(zones["a"], 7, 300, "a")
    _load(zones["b"], 9, 50, "b")
    nines = _memos_of(zones["b"], 9)
    assert set(nines) == set(range(1, 51))
    ga = guard_env("a")
    ctx = _ctx(zones, meta, "keys-7")
    started = _start(ctx, zones, tmp_path)
    with ga.transaction() as tx:
        tx.update("memos", {"memo_id": 150}, {"body": "changed while staged"})  # staged later, older
        tx.update("memos", {"memo_id": 5}, {"body": "changed after staging"})  # staged already, older
        tx.delete("memos", {"memo_id": 6})
        tx.insert("memos", {"memo_id": 1000, "tenant_id": 7, "body": "new"})
    _applied_everywhere(meta, zones)
    early = _key_map(zones["b"], "keys-7")
    assert set(early) == {5, 6, 150, 1000} and early[6] is None, early  # landed by the stream, 6 deleted
    result = _stock(ctx, zones, tmp_path, started, chunk_rows=100)
    assert result["memos"]["merged"] == 300 - 3, result  # 5, 6 and 150 were newer in b already
    mapped = _key_map(zones["b"], "keys-7")
    assert set(mapped) == set(range(1, 301)) | {1000} and mapped[6] is None
    targets = [t for t in mapped.values() if t is not None]
    assert len(set(targets)) == 300 and min(targets) > 50, targets  # b's own counter, past tenant 9's keys
    with ga.transaction() as tx:
        tx.update("memos", {"memo_id": 1}, {"body": "a's memo 1"})  # b's memo 1 is tenant 9's
    _applied_everywhere(meta, zones)
    sevens = _memos_of(zones["b"], 7)
    assert sevens[mapped[1]] == "a's memo 1" and sevens[mapped[5]] == "changed after staging"
    assert sevens[mapped[150]] == "changed while staged" and sevens[mapped[1000]] == "new"
    assert _memos_of(zones["b"], 9) == nines
    assert _verify(ctx, zones, tmp_path)["differ"] == 0  # (memos are compared by the final check)
    steps.stop_write(ctx)
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    counts = steps.final_check(ctx)
    assert counts["memos"] == {"a": 300, "b": 300}, counts
    steps.flip(ctx)
    assert steps.lift(ctx).status == "succeeded"
    source = _memos_of(zones["a"], 7)
    assert steps.release(ctx) == {"memos": 300}
    mapped = _key_map(zones["b"], "keys-7")  # kept: which key became which
    assert {mapped[k]: body for k, body in source.items()} == _memos_of(zones["b"], 7)
    assert _memos_of(zones["b"], 9) == nines and _memos_of(zones["a"], 7) == {}


def test_a_row_changed_behind_the_key_map_fails_the_final_check_and_the_rollback_forgets_the_keys(
    memos, cluster, guard_env, zones, meta, tmp_path
):
    """A moved memo changed in b behind replication's back: the final check, comparing
    through the map, names memos and both counts' checksums; the rollback purges tenant 7's
    memos and the run's key map from b, tenant 9's memos stay, a keeps writing."""
    _load(zones["a"], 7, 120, "a")
    _load(zones["b"], 9, 10, "b")
    ga = guard_env("a")
    ctx = _ctx(zones, meta, "keys-back-7")
    started = _start(ctx, zones, tmp_path)
    _stock(ctx, zones, tmp_path, started, chunk_rows=100)
    mapped = _key_map(zones["b"], "keys-back-7")
    with zones["b"].connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("UPDATE memos SET body = 'tampered' WHERE memo_id = %s", (mapped[1],))
        conn.commit()
    steps.stop_write(ctx)
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    with pytest.raises(MigrationError, match=r"final_check: .*memos: a 120 rows \(checksum \d+\), b 120 rows"):
        steps.final_check(ctx)
    steps.rollback(ctx, "test")
    assert _memos_of(zones["b"], 7) == {} and _key_map(zones["b"], "keys-back-7") == {}
    assert len(_memos_of(zones["b"], 9)) == 10
    with zones["b"].connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'zonesync' "
                    "AND TABLE_NAME LIKE 'key\\_stage\\_%'")  # fmt: skip
        assert cur.fetchone()[0] == 0
    with ga.transaction() as tx:
        tx.update("memos", {"memo_id": 1}, {"body": "still a's"})
    assert resident.admitted(zones["b"].connect("zonesync_app"), "keys-back-7") is False
    # a merge still running once the run is rolled back (its task killed, its driver alive)
    # stops at its next batch, landing nothing
    conn = zones["b"].connect("zonesync_app")
    try:
        replaced_stage.create_stage(conn, "zonesync_app", "memos", "key_stage_late")
        with conn.cursor() as cur:
            cur.execute("INSERT INTO zonesync.key_stage_late (memo_id, tenant_id, body, _zs_origin, _zs_version) "
                        "VALUES (5, 7, 'late', 1, 99)")  # fmt: skip
        conn.commit()
        cols = ["memo_id", "tenant_id", "body", "_zs_origin", "_zs_version"]
        with pytest.raises(replaced_stage.NotAdmitted, match="no longer admits its LEs"):
            replaced_stage.merge(conn, "keys-back-7", "zonesync_app", "memos", "memo_id", cols, "key_stage_late")
    finally:
        replaced_stage.drop_stage(conn, "key_stage_late")
        conn.close()
    assert _memos_of(zones["b"], 7) == {} and _key_map(zones["b"], "keys-back-7") == {}
