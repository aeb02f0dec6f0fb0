"""Progress and ETA of running copies and migrations, as the console's API and
`zonesync migrate status` show them: a copy's chunks from the target zone's
zonesync.copy_chunks; a migration's stage over its whole run (console/migration_progress.py),
its stage's chunks (the stock copy's in the target zone, the verify check's in meta) and the
whole run's ETA from the median of the last succeeded migrations' later stages."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.integration.console.conftest import PREFIX

pytestmark = pytest.mark.integration

T0 = dt.datetime(2037, 1, 2, 12, 0, 0)  # newer than any other test's runs (TIMESTAMP ends in 2038)
MIGRATION = ("INSERT INTO migrations (run_id, be_type, be_id, source_zone, target_zone, mode, les_json, reason, actor, "
             "status, phase, created_at, stop_published_at, lifted_at, finished_at) VALUES (%s, 'tenant', '7', 'a', "
             "'b', 'plan1', '[[\"tenant\", \"7\"]]', 'r', 'tester', %s, %s, %s, %s, %s, %s)")  # fmt: skip


def _chunks(conn, run_id: str, table: str, n: int, done: int, rows: int = 1000) -> None:
    """n chunks of `table`, the first `done` of them done (rows each), 2 s apart from T0."""
    with conn.cursor() as cur:
        for k in range(n):
            finished = k < done
            cur.execute("INSERT INTO zonesync.copy_chunks (run_id, table_name, chunk_no, status, rows_read, "
                        "rows_landed, done_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        (run_id, table, k, "done" if finished else "pending", rows if finished else 0,
                         rows if finished else 0, T0 + dt.timedelta(seconds=2 * k) if finished else None))  # fmt: skip
    conn.commit()


@pytest.fixture
def target_chunks(zones):
    """Connections to zones b and c; the chunks a test writes there removed afterwards."""
    conns = {z: zones[z].connect() for z in ("b", "c")}
    yield conns
    for conn in conns.values():
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync.copy_chunks WHERE run_id LIKE %s", (PREFIX + "%",))
        conn.commit()
        conn.close()


def test_a_running_copy_shows_its_chunks_rate_and_eta(api, meta, runs_cleanup, target_chunks):
    run_id = f"{PREFIX}copy-running"
    meta.run("INSERT INTO copies (run_id, source_zone, target_zone, mode, tables_json, reason, actor, created_at) "
             "VALUES (%s, 'a', 'c', 'rebuild', '[\"orders\"]', 'r', 'tester', %s)", (run_id, T0))  # fmt: skip
    _chunks(target_chunks["c"], run_id, "orders", 5, 3)
    run = api.get("/api/v1/runs", params={"kind": "copy", "limit": 1}).json()["runs"][0]
    assert (run["run_id"], run["status"]) == (run_id, "running")
    p = run["progress"]
    # 2 chunks of 1000 rows committed after the first, over 4 s: 500 rows/s; 2 chunks left: 4 s
    assert (p["done"], p["total"], p["rows"]) == (3, 5, 3000), p
    assert p["rate_rows_s"] == pytest.approx(500.0) and p["eta_s"] == pytest.approx(4.0), p


def _history(meta) -> None:
    """20 succeeded plan1 migrations (newer than any other test's): cutovers of 1, 2 or 3 s,
    releases of 4, 5 or 6 s, verify checks of 10, 20 or 30 s: medians 2, 5 and 20 s."""
    for k in range(20):
        began = T0 + dt.timedelta(minutes=k)
        stop = began + dt.timedelta(seconds=60)
        lift = stop + dt.timedelta(seconds=1 + k % 3)
        end = lift + dt.timedelta(seconds=4 + k % 3)
        run_id = f"{PREFIX}mig-done-{k}"
        meta.run(MIGRATION, (run_id, "succeeded", "lifted", began, stop, lift, end))
        meta.run("INSERT INTO checks (run_id, zones_json, tables_json, chunk_rows, actor, status, created_at, "
                 "finished_at) VALUES (%s, '[\"a\", \"b\"]', '[\"tenants\"]', 1000, 'le_migration', 'succeeded', %s, "
                 "%s)", (f"{run_id}.verify", began, began + dt.timedelta(seconds=10 * (1 + k % 3))))  # fmt: skip


def _progress(api, run_id: str) -> dict:
    listed = api.get("/api/v1/runs", params={"kind": "migration", "limit": 1}).json()["runs"][0]
    assert listed["run_id"] == run_id, listed
    one = api.get(f"/api/v1/migrations/{run_id}")
    assert one.status_code == 200, one.text
    assert one.json()["progress"]["stage"] == listed["progress"]["stage"]
    return listed["progress"]


def test_a_running_migration_shows_its_stage_and_the_whole_runs_eta(api, meta, runs_cleanup, target_chunks,
                                                                    capsys):  # fmt: skip
    from zonesync import cli

    _history(meta)
    run_id = f"{PREFIX}mig-running"
    meta.run(MIGRATION, (run_id, "running", "preflight", T0 + dt.timedelta(hours=1), None, None, None))

    p = _progress(api, run_id)  # nothing copied yet: the stock stage, no rate, no ETA
    assert (p["stage"], p["stage_no"], p["stages"]) == ("stock", 2, ["preflight", "stock", "verify", "gate", "cutover",
                                                                     "release"]), p  # fmt: skip
    assert p["eta_s"] is None and p["eta_note"] == "ETA unknown: no stock rate yet", p

    # the stock copy half done in the target: its 4 s left, then verify 20, cutover 2, release 5
    _chunks(target_chunks["b"], f"{run_id}.stock", "tenants", 4, 2)
    p = _progress(api, run_id)
    assert (p["stage"], p["done"], p["total"], p["rows"]) == ("stock", 2, 4, 2000), p
    assert p["chunk_eta_s"] == pytest.approx(4.0) and p["eta_s"] == pytest.approx(31.0), p
    assert "not counting the gate's wait" in p["eta_note"]

    # the verify check running, 3 of 4 chunks compared (500 rows/s, 2 s left): 2 + 2 + 5
    check = f"{run_id}.verify"
    meta.run("INSERT INTO checks (run_id, zones_json, tables_json, chunk_rows, actor, created_at) VALUES "
             "(%s, '[\"a\", \"b\"]', '[\"tenants\"]', 1000, 'le_migration', NOW(6))", (check,))  # fmt: skip
    for n in range(4):
        at = T0 + dt.timedelta(seconds=2 * n) if n < 3 else None
        meta.run("INSERT INTO check_chunks (run_id, table_name, chunk_no, status, rows_max, done_at) VALUES "
                 "(%s, 'tenants', %s, %s, 1000, %s)", (check, n, "match" if n < 3 else "pending", at))  # fmt: skip
    p = _progress(api, run_id)
    assert (p["stage"], p["stage_no"], p["done"], p["total"]) == ("verify", 3, 3, 4), p
    assert p["eta_s"] == pytest.approx(9.0), p

    meta.run("UPDATE migrations SET phase = 'checked' WHERE run_id = %s", (run_id,))
    p = _progress(api, run_id)  # at the gate: the cutover and the release left, the gate's wait not counted
    assert (p["stage"], p["total"], p["eta_s"]) == ("gate", None, pytest.approx(7.0)), p

    meta.run("UPDATE migrations SET phase = 'stopped', stop_published_at = NOW(6) - INTERVAL 1500000 "
             "MICROSECOND WHERE run_id = %s", (run_id,))  # fmt: skip
    p = _progress(api, run_id)  # 1.5 s into a cutover that usually takes 2 s: 0.5 + 5 left
    assert p["stage"] == "cutover" and p["eta_s"] == pytest.approx(5.5, abs=0.3), p
    assert cli.main(["migrate", "status", run_id]) == 0
    out = capsys.readouterr().out
    assert "progress: stage 5/6 cutover; about 5 s left (median of the last 20 succeeded plan1 migrations" in out, out

    meta.run("UPDATE migrations SET phase = 'rolling_back' WHERE run_id = %s", (run_id,))
    p = _progress(api, run_id)
    assert (p["stage"], p["stage_no"], p["eta_s"], p["eta_note"]) == ("rollback", None, None, "no ETA while rollback")
