"""The console stays fast with a big meta: 1M lag samples and 10k runs. Judged by the
plans (each read a range of an index, never a scan of the table) and the answers, not
by a clock; `make bench` times it."""

from __future__ import annotations

import datetime

import pytest

from tests.integration.console.conftest import PREFIX

pytestmark = pytest.mark.integration

SAMPLES = 1_000_000
RUNS_EACH = 2_500


@pytest.fixture(scope="module")
def big_meta(meta):
    """1M lag samples of pairs x->y (a year back and more, 10 s apart) and 2,500 runs of
    every kind, added with MariaDB's sequence engine; removed afterwards."""
    meta.run("DELETE FROM lag_samples WHERE source_zone IN ('x', 'y')")
    meta.run("INSERT INTO lag_samples (source_zone, target_zone, bucket, behind_events, behind_seconds) "
             "SELECT IF(seq % 2, 'x', 'y'), 'z', UNIX_TIMESTAMP() DIV 10 * 10 - (seq DIV 2) * 10, seq % 100, "
             f"(seq % 7) / 100 FROM seq_0_to_{SAMPLES - 1}")  # fmt: skip
    meta.run("INSERT INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, "
             "behind_seconds) VALUES ('x', 'z', 0, 1, 0, 0), ('y', 'z', 0, 1, 0, 0)")  # fmt: skip
    # a day ahead: these are the newest runs, whatever runs earlier tests left
    start = "NOW(6) + INTERVAL 1 DAY + INTERVAL seq SECOND"
    seqs = f"seq_0_to_{RUNS_EACH - 1}"
    meta.run("INSERT INTO switches (run_id, zsids, from_zone, to_zone, reason, actor, status, created_at) "
             f"SELECT CONCAT('{PREFIX}s', seq), '0-9', 'a', 'b', 'r', 't', 'succeeded', {start} "
             f"FROM {seqs}")  # fmt: skip
    meta.run("INSERT INTO copies (run_id, source_zone, target_zone, mode, tables_json, reason, actor, status, "
             f"created_at) SELECT CONCAT('{PREFIX}c', seq), 'a', 'b', 'rebuild', '[]', 'r', 't', 'succeeded', "
             f"{start} FROM {seqs}")  # fmt: skip
    meta.run("INSERT INTO checks (run_id, zones_json, tables_json, chunk_rows, actor, status, created_at) "
             f"SELECT CONCAT('{PREFIX}k', seq), '[]', '[]', 1000, 't', 'succeeded', {start} FROM {seqs}")  # fmt: skip
    meta.run("INSERT INTO migrations (run_id, be_type, be_id, source_zone, target_zone, mode, les_json, reason, actor, "
             f"status, created_at) SELECT CONCAT('{PREFIX}m', seq), 'tenant', seq, 'a', 'b', 'plan1', '[]', 'r', 't', "
             f"'succeeded', {start} FROM {seqs}")  # fmt: skip
    yield
    meta.run("DELETE FROM lag_samples WHERE source_zone IN ('x', 'y')")
    meta.run("DELETE FROM apply_lag WHERE source_zone IN ('x', 'y')")
    for table in ("switches", "copies", "checks", "migrations"):
        meta.run(f"DELETE FROM {table} WHERE run_id LIKE %s", (PREFIX + "%",))


def _plans(meta, sql: str, args=()) -> list[dict]:
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"EXPLAIN {sql}", args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.close()


def test_one_hour_of_lag_from_a_million_samples_reads_an_index_range(api, meta, big_meta):
    from zonesync.meta import lag_samples

    assert meta.run("SELECT COUNT(*) FROM lag_samples")[0][0][0] >= SAMPLES
    history = api.get("/api/v1/lag/history", params={"minutes": 60}).json()
    pairs = {(p["source"], p["target"]): p["points"] for p in history["pairs"]}
    assert 360 <= len(pairs[("x", "z")]) <= 361 and 360 <= len(pairs[("y", "z")]) <= 361
    plan = _plans(meta, "SELECT bucket, behind_events, behind_seconds FROM lag_samples WHERE source_zone = %s "
                  "AND target_zone = %s AND bucket >= %s ORDER BY bucket",
                  ("x", "z", lag_samples.bucket_of(0) + history["from"]))  # fmt: skip
    assert plan[0]["key"] == "PRIMARY" and plan[0]["type"] == "range" and int(plan[0]["rows"]) < 2000, plan


def test_a_page_of_runs_from_ten_thousand_reads_each_kind_by_its_start(api, meta, big_meta):
    page = api.get("/api/v1/runs", params={"limit": 50}).json()
    assert len(page["runs"]) == 50 and page["next_before"]
    times = [r["created_at"] for r in page["runs"]]
    assert times == sorted(times, reverse=True)
    assert {r["kind"] for r in page["runs"]} == {"switch", "copy", "check", "migration"}  # interleaved by time
    deep = api.get("/api/v1/runs", params={"limit": 50, "before": page["next_before"]}).json()
    assert (deep["runs"][0]["created_at"], deep["runs"][0]["run_id"]) < (page["runs"][-1]["created_at"],
                                                                         page["runs"][-1]["run_id"])  # fmt: skip
    assert not {r["run_id"] for r in deep["runs"]} & {r["run_id"] for r in page["runs"]}
    from zonesync.console import runs

    for kind, table in (("switch", "switches"), ("copy", "copies"), ("check", "checks"), ("migration", "migrations")):
        at, _, run_id = deep["next_before"].partition("|")
        sql = (f"{runs._SELECT[kind]} WHERE created_at <= %s AND (created_at < %s OR run_id < %s) "
               "ORDER BY created_at DESC, run_id DESC LIMIT 50")  # fmt: skip
        at = datetime.datetime.fromisoformat(at)  # (as runs.recent passes it)
        plan = _plans(meta, sql, (at, at, run_id))
        assert plan[0]["key"] == f"idx_{table}_created" and plan[0]["type"] == "range", (kind, plan)
