"""Definitions that disagree between zones (S002-18): a column renamed, dropped, retyped or
added on one side, a changed primary key, while writes go on. No value is ever written to
another column; the table is held in the target with an alert naming the difference and
the DDL behind it, its events parked, and every other table goes on; once the definitions
agree, `zonesync schema resume` drains the parked events in order and the table's events
go straight in again. An additive change made safe in either order holds nothing."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.background import wait_until
from tests.support.drift import TABLE, drop_tables, fresh_tables, run_sql
from tests.support.replication import Cluster, reset_state
from zonesync import cli
from zonesync.apply.batch import table_holds
from zonesync.schema import definitions

pytestmark = pytest.mark.integration


def _rows(conn, columns="id, note, qty"):
    with conn.cursor() as cur:
        cur.execute(f"SELECT {columns} FROM zonesync_app.{TABLE} ORDER BY id")
        return cur.fetchall()


def _tenants(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync_app.tenants")
        return cur.fetchone()[0]


def _write(a, ids, column="note", version=1):
    with a.cursor() as cur:
        for i in ids:
            cur.execute(
                f"INSERT INTO zonesync_app.{TABLE} (id, {column}, qty, _zs_origin, _zs_version) "
                "VALUES (%s, %s, %s, 1, %s) ON DUPLICATE KEY UPDATE "
                f"{column} = VALUES({column}), qty = VALUES(qty), _zs_version = _zs_version + 1",
                (i, f"n{i}", i, version),
            )
            cur.execute("INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
                        "VALUES (%s, 'a', 1, 1) ON DUPLICATE KEY UPDATE name = 'a2', _zs_version = _zs_version + 1",
                        (i,))  # fmt: skip


@pytest.fixture
def pair(zones, meta, broker, test_cfg):
    """Zone a's replicator and zone b's applier; the table in both zones, the same."""
    reset_state(zones, meta)
    a, b = zones["a"].connect(), zones["b"].connect()
    fresh_tables((a, b))
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=4)
    cluster.start(zones=("a",), which=("replicator",))
    cluster.start(zones=("b",), which=("applier",))
    cluster.wait_started()
    try:
        yield a, b, cluster
    finally:
        cluster.stop()
        drop_tables((a, b))
        reset_state(zones, meta)


def _holds(b) -> dict:
    return table_holds.holds(b)


def _alerts(meta, kind: str) -> list[dict]:
    with meta.connect().cursor() as cur:
        cur.execute("SELECT detail FROM alerts WHERE zone = 'b' AND kind = %s ORDER BY id", (kind,))
        return [json.loads(r[0]) for r in cur.fetchall()]


def _held(b, meta, cluster, tenants: int) -> str:
    """Wait until b holds the table while the other table's rows all arrive; the hold's detail."""
    wait_until(lambda: TABLE in _holds(b) and _tenants(b) == tenants, 30,
               "b holds the table and applies the rest")  # fmt: skip
    status, detail, _, _ = _holds(b)[TABLE]
    assert status == table_holds.HELD
    with b.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.apply_state WHERE source_zone = 'a' AND status = 'halted'")
        assert cur.fetchone()[0] == 0, "no partition halted: only the table waits"
    assert [a["table"] for a in _alerts(meta, "table_held")] == [TABLE]
    assert cluster.threads["applier-b"].is_alive()
    return detail


def _resume_and_drain(a, b, ids_after: range, column: str = "note") -> None:
    """Resume b's hold; the parked events land, the hold goes, and new writes go straight in."""
    assert table_holds.resume(b, TABLE)
    assert not table_holds.resume(b, TABLE), "only a held table is resumed"
    wait_until(lambda: TABLE not in _holds(b), 30, "the hold drained")
    _write(a, ids_after, column=column)
    wait_until(lambda: _rows(b, "id")[-1:] == ((ids_after[-1],),), 30, "new writes arrive straight")
    with b.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.parked_events")
        assert cur.fetchone()[0] == 0


def test_a_column_renamed_at_the_source_holds_the_table_until_the_target_follows(pair, meta, capsys):
    a, b, cluster = pair
    _write(a, range(1, 21))
    wait_until(lambda: len(_rows(b)) == 20, 30, "the first rows arrive")
    run_sql(a, f"ALTER TABLE zonesync_app.{TABLE} RENAME COLUMN note TO memo")
    _write(a, range(21, 41), column="memo")
    _write(a, [1, 2], column="memo", version=2)  # updates of rows b has: parked, in order
    detail = _held(b, meta, cluster, tenants=40)
    assert "column(s) memo that drift lacks in zone b" in detail, detail
    assert "zone a ran `ALTER TABLE zonesync_app.drift RENAME COLUMN note TO memo`" in detail, detail
    assert f"zonesync schema resume --zone b --table {TABLE}" in detail
    assert [r[0] for r in _rows(b)] == list(range(1, 21)), "nothing of the renamed table applied"
    assert _holds(b)[TABLE][3] == 22, "the 20 inserts and 2 updates are parked"
    # what an operator sees: the hold, the differing definitions, the DDL read
    capsys.readouterr()
    assert cli.main(["schema", "holds", "--zone", "b"]) == 0
    assert f"zone b: {TABLE} held since" in capsys.readouterr().out
    assert cli.main(["schema", "diff", "--zone", "a", "--zone", "b", "--table", TABLE]) == 1
    out = capsys.readouterr().out
    assert f"{TABLE}.memo: varchar(40) NULL DEFAULT NULL in a; absent in b" in out, out
    assert cli.main(["schema", "log", "--table", TABLE]) == 0
    assert "RENAME COLUMN note TO memo" in capsys.readouterr().out
    # resumed before the cure: the drain meets the same difference and holds the table again
    assert cli.main(["schema", "resume", "--zone", "b", "--table", TABLE]) == 0
    wait_until(lambda: len(_alerts(meta, "table_held")) == 2, 30, "held again")
    assert _holds(b)[TABLE][0] == table_holds.HELD and _holds(b)[TABLE][3] == 22, "nothing lost"
    # the cure: b follows; then the definitions agree and the hold drains
    run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} RENAME COLUMN note TO memo", logged=False)
    shapes = {"a": definitions.read(a, [TABLE]), "b": definitions.read(b, [TABLE])}
    assert "memo" in shapes["b"][TABLE].columns and definitions.diff(shapes) == []
    assert cli.main(["schema", "diff", "--zone", "a", "--zone", "b", "--table", TABLE]) == 0
    _resume_and_drain(a, b, range(41, 46), column="memo")
    assert _rows(b, "id, memo, qty") == _rows(a, "id, memo, qty")
    assert [a["table"] for a in _alerts(meta, "table_resumed")] == [TABLE]


def test_a_changed_primary_key_holds_the_table_and_names_both_keys(pair, meta):
    a, b, cluster = pair
    _write(a, range(1, 6))
    wait_until(lambda: len(_rows(b)) == 5, 30, "the first rows arrive")
    run_sql(a, f"ALTER TABLE zonesync_app.{TABLE} DROP PRIMARY KEY, ADD PRIMARY KEY (id, tenant)")
    _write(a, range(6, 16))
    detail = _held(b, meta, cluster, tenants=15)
    assert "keyed by (id, tenant) but its primary key in zone b is (id)" in detail, detail
    assert "DROP PRIMARY KEY, ADD PRIMARY KEY (id, tenant)" in detail
    run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} DROP PRIMARY KEY, ADD PRIMARY KEY (id, tenant)", logged=False)
    _resume_and_drain(a, b, range(16, 20))
    assert _rows(b) == _rows(a)


def test_a_column_dropped_at_the_source_that_the_target_requires_holds_the_table(pair, meta):
    a, b, cluster = pair
    run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} MODIFY qty INT NOT NULL", logged=False)  # no default in b
    _write(a, range(1, 4))
    wait_until(lambda: len(_rows(b)) == 3, 30, "the first rows arrive")
    run_sql(a, f"ALTER TABLE zonesync_app.{TABLE} DROP COLUMN qty")
    with a.cursor() as cur:
        cur.execute(f"INSERT INTO zonesync_app.{TABLE} (id, note, _zs_origin, _zs_version) VALUES (9, 'x', 1, 1)")
    detail = _held(b, meta, cluster, tenants=3)
    assert "requires column(s) qty that zone a's events lack" in detail, detail
    run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} DROP COLUMN qty", logged=False)
    table_holds.resume(b, TABLE)
    wait_until(lambda: TABLE not in _holds(b), 30, "the hold drained")
    assert _rows(b, "id, note") == _rows(a, "id, note")


def test_a_column_retyped_in_the_target_so_values_no_longer_fit_holds_the_table(pair, meta):
    a, b, cluster = pair
    run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} MODIFY note VARCHAR(2)", logged=False)
    _write(a, range(101, 104))  # notes of 4 characters: too long for b now
    detail = _held(b, meta, cluster, tenants=3)
    assert "column note" in detail and "does not fit drift in zone b" in detail, detail
    assert _rows(b) == (), "no value cut to fit"
    run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} MODIFY note VARCHAR(40)", logged=False)
    _resume_and_drain(a, b, range(104, 106))
    assert _rows(b) == _rows(a)


def test_a_nullable_column_added_target_first_then_source_holds_nothing(pair, meta):
    a, b, cluster = pair
    stop = time.monotonic() + 4
    n = 0
    run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} ADD COLUMN extra VARCHAR(10) NULL", logged=False)
    while time.monotonic() < stop:  # writes go on across the change at the source
        n += 1
        _write(a, [n])
        if n == 30:
            run_sql(a, f"ALTER TABLE zonesync_app.{TABLE} ADD COLUMN extra VARCHAR(10) NULL")
        if n > 30:
            with a.cursor() as cur:
                cur.execute(f"UPDATE zonesync_app.{TABLE} SET extra = 'e', _zs_version = _zs_version + 1 "
                            "WHERE id = %s", (n,))  # fmt: skip
    assert n > 40
    wait_until(lambda: _rows(b, "id, note, qty, extra") == _rows(a, "id, note, qty, extra"), 30, "converged")
    assert _holds(b) == {} and _alerts(meta, "table_held") == []


def _parked(b) -> int:
    with b.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM zonesync.parked_events WHERE table_name = '{TABLE}'")
        return cur.fetchone()[0]


def test_an_applier_killed_mid_drain_finishes_it_after_restart(zones, meta, broker, test_cfg, tmp_path):
    """kill -9 of b's applier (its own process) between drain steps: the restarted one
    drains the rest; events applied but not yet deleted are applied again as no-ops, and b
    ends with exactly a's rows (every update after its insert)."""
    from tests.support.applier_process import spawn_worker

    reset_state(zones, meta)
    a, b = zones["a"].connect(), zones["b"].connect()
    fresh_tables((a, b))
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=4)
    env = {"ZONESYNC_APPLY_CHECK_OWNERS": "0", "ZONESYNC_TEST_DRAIN_BATCH": "20"}
    child = None
    try:
        cluster.start(zones=("a",), which=("replicator",))
        cluster.wait_started()
        child = spawn_worker("tests.support.applier_process", cluster, "b", tmp_path / "b1.log", **env)
        run_sql(a, f"ALTER TABLE zonesync_app.{TABLE} RENAME COLUMN note TO memo")
        with a.cursor() as cur:
            cur.executemany(f"INSERT INTO zonesync_app.{TABLE} (id, memo, qty, _zs_origin, _zs_version) "
                            "VALUES (%s, 'v1', %s, 1, 1)", [(i, i) for i in range(1, 1201)])  # fmt: skip
            for i in range(1, 301):
                cur.execute(f"UPDATE zonesync_app.{TABLE} SET memo = 'v2', _zs_version = 2 WHERE id = %s", (i,))
        wait_until(lambda: TABLE in _holds(b) and _parked(b) == 1500, 60, "b parks all 1500 events")
        run_sql(b, f"ALTER TABLE zonesync_app.{TABLE} RENAME COLUMN note TO memo", logged=False)
        assert table_holds.resume(b, TABLE)
        seen = wait_until(lambda: (n := _parked(b)) < 1500 and n, 30, "the drain under way", step=0.005)
        child.kill()  # SIGKILL, mid-drain
        child.wait(10)
        assert 0 < seen < 1500 and _holds(b)[TABLE][0] == table_holds.DRAINING
        child = spawn_worker("tests.support.applier_process", cluster, "b", tmp_path / "b2.log", **env)
        wait_until(lambda: TABLE not in _holds(b), 60, "the restarted applier drained the rest")
        assert _parked(b) == 0
        assert _rows(b, "id, memo, qty, _zs_version") == _rows(a, "id, memo, qty, _zs_version")
        assert len(_rows(b, "id")) == 1200 and {r[1] for r in _rows(b, "id, memo")[:300]} == {"v2"}
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(10)
        cluster.stop()
        drop_tables((a, b))
        reset_state(zones, meta)
