"""The console's reads (zonesync.console, served under /zonesync/api/v1): each answer
matches what meta holds, pages and filters hold together, and bad queries are refused
in one line naming the field."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.integration.console.conftest import PREFIX

pytestmark = pytest.mark.integration

# in the future: the runs a test adds are the newest, whatever runs earlier tests left
T0 = dt.datetime(2037, 1, 1, 12, 0, 0)  # (TIMESTAMP ends in 2038)


ADD = {
    "switch": "INSERT INTO switches (run_id, zsids, from_zone, to_zone, reason, actor, status, blocked_at, "
    "activated_at, created_at) VALUES (%s, '0-99', 'a', 'b', 'r', 'tester', 'succeeded', %s, %s, %s)",
    "copy": "INSERT INTO copies (run_id, source_zone, target_zone, mode, tables_json, reason, actor, status, "
    "created_at) VALUES (%s, 'a', 'c', 'rebuild', '[\"orders\"]', 'r', 'tester', 'succeeded', %s)",
    "check": "INSERT INTO checks (run_id, zones_json, tables_json, chunk_rows, actor, status, created_at) "
    "VALUES (%s, '[]', '[\"tenants\"]', 1000, 'tester', 'succeeded', %s)",
    "migration": "INSERT INTO migrations (run_id, be_type, be_id, source_zone, target_zone, mode, les_json, "
    "reason, actor, status, created_at) VALUES (%s, 'tenant', '7', 'a', 'b', 'plan1', '[]', 'r', 'tester', "
    "'succeeded', %s)",
}


def _add_runs(meta, n_each: int, start: dt.datetime = T0, step_s: float = 1.0) -> list[tuple[str, str]]:
    """n_each runs of every kind, interleaved in time (kind i of run k at start + (4k + i)
    steps), succeeded; [(kind, run_id)] newest first."""
    made = []
    for k in range(n_each):
        for i, kind in enumerate(ADD):
            at = start + dt.timedelta(seconds=(4 * k + i) * step_s)
            run_id = f"{PREFIX}{kind}-{k}"
            args = (run_id, at, at + dt.timedelta(milliseconds=250), at) if kind == "switch" else (run_id, at)
            meta.run(ADD[kind], args)
            made.append((kind, run_id))
    return made[::-1]


def test_runs_are_one_list_newest_first_paged_and_filtered(api, meta, runs_cleanup):
    made = _add_runs(meta, 5)
    seen, before = [], None
    while True:
        got = api.get("/api/v1/runs", params={"limit": 3, **({"before": before} if before else {})})
        assert got.status_code == 200, got.text
        page = got.json()
        seen += [(r["kind"], r["run_id"]) for r in page["runs"] if r["run_id"].startswith(PREFIX)]
        before = page["next_before"]
        if before is None or len(seen) >= len(made):
            break
    assert seen == made  # every run once, in time order across the kinds
    first = api.get("/api/v1/runs", params={"kind": "switch", "limit": 2}).json()["runs"]
    assert [r["run_id"] for r in first] == [f"{PREFIX}switch-4", f"{PREFIX}switch-3"]
    assert first[0]["window_ms"] == pytest.approx(250.0) and first[0]["what"] == "ZSIDs 0-99 a -> b"
    assert first[0]["airflow_url"] == f"/dags/zone_switch/runs/{PREFIX}switch-4"
    copy = api.get("/api/v1/runs", params={"kind": "copy", "limit": 1}).json()["runs"][0]
    assert copy["what"] == "a -> c (rebuild), tables orders" and copy["window_ms"] is None
    mig = api.get("/api/v1/runs", params={"kind": "migration", "limit": 1}).json()["runs"][0]
    assert mig["what"] == "tenant 7 a -> b (plan1)"


@pytest.mark.parametrize(
    ("params", "words"),
    [({"kind": "backup"}, "kind: 'backup' is not one of switch, copy, check, migration"),
     ({"limit": 0}, "limit: 0 is out of range; use 1..500"),
     ({"before": "yesterday"}, "before: 'yesterday' is not a time"),
     ({"limit": "many"}, "limit: Input should be a valid integer")],
)  # fmt: skip
def test_bad_runs_queries_are_one_line(api, params, words):
    got = api.get("/api/v1/runs", params=params)
    assert got.status_code == 400 and got.json()["detail"].startswith(words), got.text


def test_a_running_check_shows_progress_and_eta(api, meta, runs_cleanup):
    run_id = f"{PREFIX}check-running"
    meta.run("INSERT INTO checks (run_id, zones_json, tables_json, chunk_rows, actor, created_at) VALUES "
             "(%s, '[]', '[\"tenants\", \"orders\"]', 1000, 'tester', NOW(6))", (run_id,))  # fmt: skip
    for table, chunks_done in (("tenants", 3), ("orders", 1)):
        for n in range(4):
            done = n < chunks_done
            meta.run("INSERT INTO check_chunks (run_id, table_name, chunk_no, status, rows_max, done_at) VALUES "
                     "(%s, %s, %s, %s, 1000, %s)", (run_id, table, n, "match" if done else "pending",
                                                     T0 + dt.timedelta(seconds=2 * n) if done else None))  # fmt: skip
    run = api.get("/api/v1/runs", params={"kind": "check", "limit": 1}).json()["runs"][0]
    assert run["run_id"] == run_id and run["status"] == "running"
    p = run["progress"]
    assert (p["done"], p["total"], p["rows"]) == (4, 8, 4000), p
    # tenants: 2 chunks of 1000 rows after the first commit, over 4 s -> 500 rows/s, 1 chunk left -> 2 s
    assert p["rate_rows_s"] == pytest.approx(500.0) and p["eta_s"] == pytest.approx(2.0), p


def test_zone_map_is_the_current_rules_with_the_ranges_moving(api, meta, runs_cleanup, guard_env):
    from zonesync.meta.store import MetaStore

    version, rules = MetaStore(meta).rules_at()
    meta.run("INSERT INTO switches (run_id, zsids, from_zone, to_zone, reason, actor) VALUES "
             "(%s, '10-19,40', 'a', 'b', 'r', 'tester')", (f"{PREFIX}switch-running",))  # fmt: skip
    doc = api.get("/api/v1/rules").json()
    assert doc["version"] == version and (doc["zsid_min"], doc["zsid_max"]) == (rules.zsid_min, rules.zsid_max)
    assert [(r["lo"], r["hi"], r["zone"], r["status"]) for r in doc["ranges"]] == [
        (r.lo, r.hi, r.zone, r.status) for r in rules.rules]  # fmt: skip
    assert [(m["lo"], m["hi"], m["from"], m["to"]) for m in doc["moving"]] == [(10, 19, "a", "b"), (40, 40, "a", "b")]


def test_alerts_listed_acknowledged_once_and_counted_per_zone(api, meta):
    from zonesync.meta import alerts

    meta.run("UPDATE alerts SET acked = 1")
    alerts.record(meta, "b", "row_locked", {"table": "orders", "pk": [1]})
    listed = api.get("/api/v1/alerts").json()["alerts"]
    assert [(a["zone"], a["kind"], a["detail"]) for a in listed] == [
        ("b", "row_locked", {"table": "orders", "pk": [1]})]  # fmt: skip
    zones = {z["zone"]: z for z in api.get("/api/v1/zones").json()["zones"]}
    assert zones["b"]["open_alerts"] == 1 and "1 open alerts (`zonesync alerts`)" in zones["b"]["problems"]
    assert zones["b"]["health"] == "degraded" and zones["a"]["open_alerts"] == 0
    alert_id = listed[0]["id"]
    assert api.post(f"/api/v1/alerts/{alert_id}/ack").json() == {"id": alert_id, "acked": True}
    assert api.get("/api/v1/alerts").json()["alerts"] == []
    assert api.post(f"/api/v1/alerts/{alert_id + 1000}/ack").status_code == 404
    assert api.post("/api/v1/alerts/x/ack").status_code == 400


def test_lag_history_is_what_the_appliers_sampled(api, meta, cluster, guard_env):
    """Appliers add one sample per source and 10 s as they report lag; the chart's read is
    that, per pair, and the lag now is apply_lag's."""
    from zonesync.dev import procs

    guard = guard_env("a")
    with guard.transaction() as txn:
        txn.insert("tenants", {"tenant_id": 1, "name": "lag"})
    assert procs.wait_until(lambda: meta.run("SELECT COUNT(*) FROM lag_samples WHERE source_zone = 'a' "
                                             "AND target_zone IN ('b', 'c')")[0][0][0] >= 2, 30)  # fmt: skip
    history = api.get("/api/v1/lag/history", params={"minutes": 5}).json()
    pairs = {(p["source"], p["target"]): p["points"] for p in history["pairs"]}
    for pair in (("a", "b"), ("a", "c")):
        stored, _ = meta.run("SELECT bucket, behind_events, behind_seconds FROM lag_samples WHERE source_zone = %s "
                             "AND target_zone = %s AND bucket >= %s ORDER BY bucket",
                             (*pair, history["from"]))  # fmt: skip
        assert pairs[pair] and pairs[pair][: len(stored)] == [[b, e, s] for b, e, s in stored][: len(pairs[pair])]
        assert all(p[0] % 10 == 0 for p in pairs[pair])
    now = api.get("/api/v1/lag").json()
    assert {(p["source"], p["target"]) for p in now["pairs"]} >= {("a", "b"), ("a", "c"), ("b", "a")}
    assert api.get("/api/v1/lag/history", params={"minutes": 0}).status_code == 400

    def zone_a() -> dict:
        return {z["zone"]: z for z in api.get("/api/v1/zones").json()["zones"]}["a"]

    def serving(zone: dict) -> bool:  # its replicator and both appliers have reported
        return not [p for p in zone["problems"] if "applier" in p or "replicator" in p]

    assert procs.wait_until(lambda: serving(zone_a()), 30), zone_a()
    got = zone_a()
    assert got["replicator"]["holder"] and set(got["appliers"]) == {"b", "c"}
    assert got["replicator"]["reported_s_ago"] < 3.0 and got["guards"] == {
        "total": 1,
        "healthy": 1,
        "versions": got["guards"]["versions"],
    }


def test_lag_samples_keep_the_largest_figure_per_bucket_and_prune_old_ones(meta):
    from zonesync.meta import lag_samples

    meta.run("DELETE FROM lag_samples WHERE source_zone = 'x'")
    at = 1_800_000_005.0
    rows = [("x", "y", 0, 10, 5, 0.2), ("x", "y", 1, 11, 7, 0.9), ("x", "z", 0, 3, 1, 0.01)]
    assert lag_samples.samples(rows, at) == [("x", "y", 1_800_000_000, 12, 0.9), ("x", "z", 1_800_000_000, 1, 0.01)]
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            lag_samples.write(cur, lag_samples.samples(rows, at))
            lag_samples.write(cur, [("x", "y", 1_800_000_000, 3, 2.5)])  # a later report in the same bucket
            lag_samples.write(cur, [("x", "y", 1_800_000_000 - lag_samples.KEEP_S - 10, 1, 1.0)])  # past keeping
            assert lag_samples.read(cur, "x", "y", 0) == [[1_800_000_000 - lag_samples.KEEP_S - 10, 1, 1.0],
                                                           [1_800_000_000, 12, 2.5]]  # fmt: skip
            assert lag_samples.prune(cur, {("x", "y")}, at) == 1
            assert lag_samples.read(cur, "x", "y", 0) == [[1_800_000_000, 12, 2.5]]
    finally:
        conn.close()
        meta.run("DELETE FROM lag_samples WHERE source_zone = 'x'")


def test_check_report_as_json_and_html(api, meta, runs_cleanup):
    _add_runs(meta, 1)
    got = api.get(f"/api/v1/checks/{PREFIX}check-0")
    assert got.status_code == 200 and got.json()["run_id"] == f"{PREFIX}check-0" and got.json()["tables"].keys() == {
        "tenants"}  # fmt: skip
    page = api.get(f"/api/v1/checks/{PREFIX}check-0", params={"format": "html"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert f"{PREFIX}check-0" in page.text
    assert api.get(f"/api/v1/checks/{PREFIX}nothing").status_code == 404
    assert json.loads(api.get("/api/v1/openapi.json").text)["paths"]["/api/v1/runs"]["get"]


def test_a_running_tag_backfill_shows_its_jobs_progress(api, meta):
    """The backfill job's driver writes its plan and each wave to meta (tagging/backfill_runs.py);
    the runs page shows it with the latest attempt's rate and the ETA."""
    from zonesync.tagging.backfill_runs import BackfillRuns

    run_id = f"{PREFIX}backfill"
    meta.run("DELETE FROM backfills WHERE run_id = %s", (run_id,))
    runs = BackfillRuns(meta)
    try:
        runs.start(run_id, "b", ["orders"], 10, 2, 2000, "manual__bf")  # a resumed run: 2 chunks done before
        runs.wave(run_id, 4, 4000)
        # the attempt began 8 s before its last wave: 4000 rows in 8 s = 500 rows/s; 4 chunks of 1000 left: 8 s
        meta.run("UPDATE backfills SET attempt_at = updated_at - INTERVAL 8 SECOND WHERE run_id = %s", (run_id,))
        run = api.get("/api/v1/runs", params={"kind": "backfill", "limit": 1}).json()["runs"][0]
        assert run["run_id"] == run_id and run["what"] == "tags of zone b, tables orders", run
        assert run["airflow_url"] == "/dags/tag_backfill/runs/manual__bf"
        p = run["progress"]
        assert (p["done"], p["total"], p["rows"]) == (6, 10, 6000), p
        assert p["rate_rows_s"] == pytest.approx(500.0, rel=0.01) and p["eta_s"] == pytest.approx(8.0, rel=0.01), p
        runs.finish(run_id, "succeeded")
        done = api.get("/api/v1/runs", params={"kind": "backfill", "limit": 1}).json()["runs"][0]
        assert done["status"] == "succeeded" and done["progress"] is None and done["finished_at"]
    finally:
        meta.run("DELETE FROM backfills WHERE run_id = %s", (run_id,))


def test_the_api_reference_page_lists_every_route(api):
    page = api.get("/api/v1/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    doc = api.get("/api/v1/openapi.json").json()
    for path, methods in doc["paths"].items():
        for method in methods:
            assert f"<code>{method.upper()}</code></td><td><code>/zonesync{path}</code>" in page.text, (method, path)
    assert "from_zone, to_zone, reason" in page.text  # a body's fields (POST /switches)
