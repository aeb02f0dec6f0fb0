"""`zonesync dev up | down | status` as a user runs it, including the ways it goes wrong."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from zonesync.dev import procs

pytestmark = pytest.mark.e2e

ZONESYNC = str(Path(sys.executable).parent / "zonesync")


@pytest.fixture
def dev_env(tmp_path):
    """A private environment for one test: its own state dir and ports; torn down after."""
    base = procs.free_port_block(9)
    env = {
        **os.environ,
        "ZONESYNC_STATE_DIR": str(tmp_path / "state"),
        "ZONESYNC_BASE_PORT": str(base),
        "ZONESYNC_AIRFLOW_PORT": str(base + 5),
        "ZONESYNC_KV_BASE_PORT": str(base + 5),  # the zones' Redis at base + 6..8
        "ZONESYNC_WITH_AIRFLOW": "0",
    }
    yield env
    subprocess.run([ZONESYNC, "dev", "down"], env=env, capture_output=True, timeout=120)
    leftovers = _our_processes(tmp_path)
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"processes left running after down: {leftovers}"


def zs(env, *args, timeout=300):
    return subprocess.run([ZONESYNC, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _our_processes(root: Path) -> list[int]:
    """Pids whose command line or environment mentions the test's state dir."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (str(root).encode() in cmd or str(root).encode() in environ):
            found.append(int(entry))
    return found


def _pids(env) -> dict[str, int]:
    run = Path(env["ZONESYNC_STATE_DIR"]) / "run"
    return {p.stem: json.loads(p.read_text())["pid"] for p in run.glob("*.json")}


def test_up_status_idempotent_crash_heal_down(dev_env, tmp_path):
    first = zs(dev_env, "dev", "up")
    assert first.returncode == 0, first.stderr
    status = zs(dev_env, "dev", "status")
    assert status.returncode == 0, status.stdout
    for name in ("meta", "zone-a", "zone-b", "zone-c", "kv-a", "broker", "replicator-a", "applier-c", "tagger-b",
                 "kvtagger-c"):  # fmt: skip
        assert f"{name} " in status.stdout
    assert status.stdout.count("healthy") == 20
    pids = _pids(dev_env)

    again = zs(dev_env, "dev", "up")  # harmless: nothing restarted
    assert again.returncode == 0 and _pids(dev_env) == pids

    os.kill(pids["zone-b"], signal.SIGKILL)
    assert procs.wait_until(lambda: not procs.pid_matches(pids["zone-b"], "mariadbd"), 10)
    crashed = zs(dev_env, "dev", "status")
    assert crashed.returncode == 1
    assert any(line.startswith("zone-b") and line.endswith("crashed") for line in crashed.stdout.splitlines())

    healed = zs(dev_env, "dev", "up")
    assert healed.returncode == 0, healed.stderr
    assert "zone-b: crashed earlier" in healed.stdout
    new = _pids(dev_env)
    assert new["zone-b"] != pids["zone-b"] and new["zone-a"] == pids["zone-a"]
    assert zs(dev_env, "dev", "status").returncode == 0

    down = zs(dev_env, "dev", "down")
    assert down.returncode == 0 and "zone-b" in down.stdout
    assert _our_processes(tmp_path) == []
    assert "stopped" in zs(dev_env, "dev", "status").stdout


def test_port_in_use_is_one_clear_line_and_starts_nothing(dev_env, tmp_path):
    port = int(dev_env["ZONESYNC_BASE_PORT"]) + 2  # zone-b
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = zs(dev_env, "dev", "up")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"port {port} (zone-b) already in use" in lines[0] and "ZONESYNC_BASE_PORT" in lines[0]
    assert _our_processes(tmp_path) == []


def test_missing_java_is_one_clear_line(dev_env, tmp_path):
    env = {**dev_env, "ZONESYNC_WITH_AIRFLOW": "1", "PATH": str(Path(sys.executable).parent)}
    env.pop("JAVA_HOME", None)
    result = zs(env, "dev", "up")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "zonesync: no Java runtime found (Spark needs Java 17): run `make setup` or set JAVA_HOME"
    )
    assert _our_processes(tmp_path) == []


def test_state_dir_of_a_crashed_run_is_recovered(dev_env, tmp_path):
    assert zs(dev_env, "dev", "up").returncode == 0
    conn_port = int(dev_env["ZONESYNC_BASE_PORT"]) + 1
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=conn_port, user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE survivor")
        cur.execute("CREATE TABLE survivor.t (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("INSERT INTO survivor.t VALUES (1), (2), (3)")
    conn.close()
    # The whole run dies at once (power cut): every process group killed -9.
    for pid in _pids(dev_env).values():
        os.killpg(pid, signal.SIGKILL)
    assert procs.wait_until(lambda: _our_processes(tmp_path) == [], 10)
    # Garbage in one pid file and a pid file pointing at an unrelated live process.
    run = Path(dev_env["ZONESYNC_STATE_DIR"]) / "run"
    (run / "zone-c.json").write_text("{not json")
    (run / "meta.json").write_text(json.dumps({"pid": os.getpid(), "marker": "--datadir=/nowhere"}))

    result = zs(dev_env, "dev", "up")
    assert result.returncode == 0, result.stderr
    assert "crashed earlier" in result.stdout
    assert zs(dev_env, "dev", "status").returncode == 0
    conn = pymysql.connect(host="127.0.0.1", port=conn_port, user="root")
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM survivor.t")
        assert cur.fetchone()[0] == 3
    conn.close()


def test_bad_settings_name_the_variable(dev_env):
    result = zs({**dev_env, "ZONESYNC_ZONES": "a,B"}, "dev", "status")
    assert result.returncode == 2
    assert "ZONESYNC_ZONES" in result.stderr and "'B'" in result.stderr
    result = zs({**dev_env, "ZONESYNC_BASE_PORT": "3305"}, "dev", "up")
    assert result.returncode == 2 and "3306" in result.stderr


@pytest.mark.slow
def test_full_environment_with_airflow_up_then_down(dev_env, tmp_path):
    env = {**dev_env, "ZONESYNC_WITH_AIRFLOW": "1"}
    started = time.monotonic()
    result = zs(env, "dev", "up", "--sample", timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    status = zs(env, "dev", "status")
    assert status.returncode == 0, status.stdout
    for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert any(line.startswith(name) and line.endswith("healthy") for line in status.stdout.splitlines())
    assert "Airflow UI: http://127.0.0.1:" in result.stdout and "login: admin" in result.stdout
    assert time.monotonic() - started < 400
    _zonesync_http_api(env)
    down = zs(env, "dev", "down")
    assert down.returncode == 0
    assert procs.wait_until(lambda: _our_processes(tmp_path) == [], 30), _our_processes(tmp_path)


def _zonesync_http_api(env) -> None:
    """The plugin's HTTP API on the env's api-server: refused without Airflow's token, and
    with it the registry's answers (a registered tenant, its chat, an unknown entity, a
    bad type named in one line)."""
    from zonesync.airflow_api import AirflowApi

    rules = zs(env, "rules", "apply", str(Path(__file__).resolve().parents[2] / "examples" / "rules.yaml"), "--reason",
               "e2e: tenants 0-399 in a")  # fmt: skip
    assert rules.returncode == 0, rules.stdout + rules.stderr
    reg = zs(env, "entity", "register", "tenant", "42", "--zone", "b", "--le", "tenant:42", "--le", "chat:9001",
             "--reason", "e2e: the HTTP API")  # fmt: skip
    assert reg.returncode == 2 and "the rules place tenant 42 in zone a" in reg.stderr, reg.stderr  # its rows' zone
    reg = zs(env, "entity", "register", "tenant", "42", "--zone", "b", "--le", "tenant:42", "--le", "chat:9001",
             "--reason", "e2e: the HTTP API", "--new")  # fmt: skip
    assert reg.returncode == 0, reg.stdout + reg.stderr
    password = json.loads((Path(env["ZONESYNC_STATE_DIR"]) / "airflow" / "passwords.json").read_text())["admin"]
    # a generous timeout: on 2 cores the api-server answers slowly while the first scheduled runs start
    api = AirflowApi(f"http://127.0.0.1:{env['ZONESYNC_AIRFLOW_PORT']}", "admin", password, timeout=60)
    assert api._raw("GET", "/zonesync/api/v1/entities/chat/9001", auth=False)[0] == 401
    api._token = "not-a-token"
    assert api._raw("GET", "/zonesync/api/v1/entities/chat/9001")[0] == 403
    api._token = None
    status, doc = api._raw("GET", "/zonesync/api/v1/entities/chat/9001")
    assert status == 200 and doc["zone"] == "b" and doc["status"] == "ACTIVE" and not doc["stop_write"], doc
    assert doc["how"] == "registered (chat 9001, of tenant 42)", doc
    status, doc = api._raw("GET", "/zonesync/api/v1/tenants/42")
    assert status == 200 and doc["zone"] == "b", doc
    assert [(e["type"], e["id"], e["zone"]) for e in doc["locating_entities"]] == [("chat", "9001", "b"),
                                                                                  ("tenant", "42", "b")]  # fmt: skip
    status, doc = api._raw("GET", "/zonesync/api/v1/entities/project/77")
    assert status == 404 and "unknown" in doc["detail"], doc
    status, doc = api._raw("GET", "/zonesync/api/v1/entities/bad-type/1")
    assert status == 400 and "type 'bad-type' must be a plain name" in doc["detail"], doc
    assert api._raw("GET", "/zonesync/api/v1/tenants/43")[0] == 404
    assert api._raw("GET", "/zonesync/openapi.json", auth=False)[0] == 404  # no schema for anyone
    for path in ("/zonesync/api/v1/runs", "/zonesync/api/v1/zones", "/zonesync/api/v1/openapi.json"):
        assert api._raw("GET", path, auth=False)[0] == 401, path  # the console's reads too
    assert api._raw("GET", "/zonesync/api/v1/openapi.json")[1]["paths"]["/api/v1/switches"]["post"]
    _viewer_reads_only(env)
    _tenant_migrations(env, api)
    _console_page(env, api, password)


def _viewer_reads_only(env) -> None:
    """The dev env's `viewer` (the simple auth manager's viewer role) reads, and is refused
    the operator actions (403 naming the permission) and a switch (by Airflow itself)."""
    from zonesync.airflow_api import AirflowApi

    password = json.loads((Path(env["ZONESYNC_STATE_DIR"]) / "airflow" / "passwords.json").read_text())["viewer"]
    viewer = AirflowApi(f"http://127.0.0.1:{env['ZONESYNC_AIRFLOW_PORT']}", "viewer", password, timeout=60)
    for path in ("/zonesync/api/v1/alerts", "/zonesync/api/v1/zones", "/zonesync/api/v1/entities/chat/9001"):
        assert viewer._raw("GET", path)[0] == 200, path
    status, doc = viewer._raw("POST", "/zonesync/api/v1/alerts/1/ack")
    assert status == 403 and "edit rights on Airflow connection 'zonesync_meta'" in doc["detail"], doc
    status, doc = viewer._raw("POST", "/zonesync/api/v1/locks/b", {"table": "tenants", "pk": "[1]", "reason": "e2e"})
    assert status == 403 and "'zonesync_zone_b'" in doc["detail"], doc
    status, doc = viewer._raw("POST", "/zonesync/api/v1/switches", {"zsids": "0-99", "from_zone": "a", "to_zone": "b",
                                                                    "reason": "e2e: a viewer"})  # fmt: skip
    assert status == 403 and "airflow refused the run" in doc["detail"], doc


def _tenant_migrations(env, api) -> None:
    """Tenant 42 moved b -> c by `POST /zonesync/api/v1/tenants/42/migrations` (bad bodies
    refused in one line first, nothing triggered), followed to success and read back; then
    back to b with `zonesync migrate`, listed by `zonesync migrations`."""
    path = "/zonesync/api/v1/tenants/42/migrations"
    assert api._raw("POST", path, {"to": "c", "reason": "e2e"}, auth=False)[0] == 401
    for body, words in [({"to": "x", "reason": "e2e"}, "to: unknown zone 'x'"),
                        ({"to": "c"}, "reason: Field required"),
                        ({"to": "c", "reason": "e2e", "mode": "dual-write"}, "mode: dual-write is refused"),
                        ({"to": "b", "reason": "e2e"}, "to: tenant 42 is in zone b already"),
                        ({"to": "c", "reason": "e2e", "les": ["chat"]}, "les: 'chat' is not TYPE:ID"),
                        ({"to": "c", "reason": "e2e", "les": ["chat:1"]}, "les: chat 1 not tenant 42's"),
                        ({"to": "c", "reason": "e2e", "extra": 1}, "extra: Extra inputs")]:  # fmt: skip
        got = api._raw("POST", path, body)
        assert got[0] == 400 and words in got[1]["detail"], (body, got)
    assert api._raw("POST", "/zonesync/api/v1/tenants/43/migrations", {"to": "c", "reason": "e2e"})[0] == 404
    assert api._raw("GET", path)[1]["migrations"] == []  # nothing triggered
    status, doc = api._raw("POST", path, {"to": "c", "reason": "e2e: over HTTP"})
    assert status == 202 and doc["dag_id"] == "le_migration", doc
    run_id = doc["run_id"]
    assert api.follow("le_migration", run_id, timeout=300) == "success"
    status, doc = api._raw("GET", f"/zonesync/api/v1/migrations/{urllib.parse.quote(run_id, safe='')}")
    assert status == 200 and (doc["status"], doc["from_zone"], doc["to_zone"]) == ("succeeded", "b", "c"), doc
    assert doc["actor"] == "admin" and doc["stop_write_window_ms"] > 0, doc
    assert api._raw("GET", "/zonesync/api/v1/entities/chat/9001")[1]["zone"] == "c"
    back = zs(env, "migrate", "--tenant", "42", "--to", "b", "--reason", "e2e: back", timeout=400)
    assert back.returncode == 0 and "migration" in back.stdout and "succeeded" in back.stdout, back.stdout + back.stderr
    listed = zs(env, "migrations", "--tenant", "42")
    assert listed.returncode == 0 and run_id in listed.stdout and listed.stdout.count("succeeded") == 2, listed.stdout
    assert [m["to_zone"] for m in api._raw("GET", path)[1]["migrations"]] == ["b", "c"]


def _console_page(env, api, password: str) -> None:
    """The console page in headless Chromium, signed in through Airflow's login form: during
    a switch of ZSIDs 0-99 a -> b started by `POST /zonesync/api/v1/switches` and after it;
    each time the zone map and the runs table show what the API (meta) says. The switch is
    held at its wait for zone b by stopping b's applier (SIGSTOP) with a change of a
    pending. Also in Airflow's own navigation. Screenshots in build/test-artifacts/."""
    from tests.support import browser

    base = f"http://127.0.0.1:{env['ZONESYNC_AIRFLOW_PORT']}"
    body = {"zsids": "0-99", "from_zone": "a", "to_zone": "b", "reason": "e2e: console", "sync_timeout_s": 600,
            "lag_threshold_s": 60}  # fmt: skip
    assert api._raw("POST", "/zonesync/api/v1/switches", {**body, "zsids": "99-0"})[0] == 400
    applier_b = _pids(env)["applier-b"]
    os.kill(applier_b, signal.SIGSTOP)
    try:
        _write_through_a_guard(env, "held")  # a change of a that b must apply before the switch may activate
        status, doc = api._raw("POST", "/zonesync/api/v1/switches", body)
        assert status == 202 and doc["dag_id"] == "zone_switch", doc
        run_id = doc["run_id"]

        def blocked() -> bool:  # the switch waits for b (wait_sync) with 0-99 writable nowhere (RESHARDING)
            rules = api._raw("GET", "/zonesync/api/v1/rules")[1]
            return [m["run_id"] for m in rules["moving"]] == [run_id] and any(
                (r["lo"], r["hi"], r["status"]) == (0, 99, "RESHARDING") for r in rules["ranges"])  # fmt: skip

        assert procs.wait_until(blocked, 120), api._raw("GET", "/zonesync/api/v1/runs?kind=switch&limit=1")[1]
        with browser.page() as pg:
            browser.sign_in(pg, base, "/zonesync/console/", "admin", password)
            pg.wait_for_selector("body[data-loaded]", timeout=60_000)
            _page_matches_api(pg, api, run_id)
            assert pg.locator('rect[data-moving="0-99"]').count() == 1
            assert pg.locator(f'tr[data-run="{run_id}"]').get_attribute("data-status") == "running"
            assert pg.locator("polyline[data-pair]").count() == 6  # every zone pair's lag over the last hour
            assert pg.locator("polyline[data-events-pair]").count() == 6
            browser.screenshot(pg, "console-during-switch")
            pg.goto(base + "/plugin/zonesync")  # the page in Airflow's navigation, in the UI's frame
            pg.frame_locator("iframe").locator("body[data-loaded]").wait_for(timeout=60_000)
            browser.screenshot(pg, "console-in-airflow")
            os.kill(applier_b, signal.SIGCONT)
            assert api.follow("zone_switch", run_id, timeout=300) == "success"
            pg.goto(base + "/zonesync/console/")
            pg.wait_for_selector("body[data-loaded]", timeout=60_000)
            _page_matches_api(pg, api, run_id)
            assert pg.locator("rect[data-moving]").count() == 0
            assert pg.locator('rect[data-range="0-99"]').get_attribute("data-zone") == "b"
            assert pg.locator(f'tr[data-run="{run_id}"]').get_attribute("data-status") == "succeeded"
            browser.screenshot(pg, "console-after-switch")
    finally:
        os.kill(applier_b, signal.SIGCONT)
    _console_progress_lock_alert(env, api, password)


def _write_through_a_guard(env, name: str) -> None:
    """A new tenant in ZSIDs 0-99 written in zone a as an application does: through a guard
    (registered for the write, gone after it)."""
    import pymysql

    from zonesync.dal import Guard, ZoneDB
    from zonesync.meta.db import MetaConfig

    port = int(env["ZONESYNC_BASE_PORT"]) + 1
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root")
    with conn.cursor() as cur:
        cur.execute("SELECT tenant_id FROM zonesync_app.tenants WHERE tenant_id < 100")
        new = min(set(range(1, 100)) - {row[0] for row in cur.fetchall()})
    conn.close()
    guard = Guard(MetaConfig.from_env(env), "a", ZoneDB("127.0.0.1", port, "root", "", "zonesync_app"), period=0.5)
    guard.start()
    try:
        with guard.transaction() as tx:
            tx.insert("tenants", {"tenant_id": new, "name": name})
    finally:
        guard.close()


def _page_matches_api(pg, api, run_id: str) -> None:
    """The page's zone map, zone cards and run row are what the API returns."""
    rules = api._raw("GET", "/zonesync/api/v1/rules")[1]
    drawn = [(r.get_attribute("data-range"), r.get_attribute("data-zone"), r.get_attribute("data-status"))
             for r in pg.locator("rect[data-range]").all()]  # fmt: skip
    assert drawn == [(f"{r['lo']}-{r['hi']}", r["zone"], r["status"]) for r in rules["ranges"]], (drawn, rules)
    for zone in {r["zone"] for r in rules["ranges"]}:  # and a row per zone with its ranges
        assert pg.locator(f'rect[data-zone-row="{zone}"]').count() == sum(r["zone"] == zone for r in rules["ranges"])
    zones = api._raw("GET", "/zonesync/api/v1/zones")[1]["zones"]
    cards = [(c.get_attribute("data-zone"), c.get_attribute("data-health")) for c in pg.locator(".card").all()]
    assert cards == [(z["zone"], z["health"]) for z in zones]
    run = next(
        r for r in api._raw("GET", "/zonesync/api/v1/runs?kind=switch&limit=5")[1]["runs"] if r["run_id"] == run_id
    )
    row = pg.locator(f'tr[data-run="{run_id}"]')
    assert run["what"] in row.inner_text() and row.get_attribute("data-kind") == "switch"


# the console page with a check held mid-way, a locked row and an alert resolved through its buttons
ORDERS_FROM = 9_000_000  # tenant 300's orders added for the check (zone a owns ZSIDs 100-399)
CHECK_ORDERS = 20_000  # with the sample's 1,800: about 218 chunks of 100 rows, one per wave
MAX_LAG_S = 2.0


def _console_progress_lock_alert(env, api, password: str) -> None:
    """The page again, in a new headless Chromium: a running consistency check held mid-way
    by its throttle, its progress bar, rate and ETA as the API reports them; then a row
    locked by a real mismatch (its `row_locked` alert shown with the command that resolves
    it, the locks table's) and a row locked by `POST /locks/b`, both resolved by their
    *resolve* buttons, and the alert acknowledged by its button. Screenshots in
    build/test-artifacts/ (console-check-held, console-lock-and-alert, console-lock-resolved,
    console-alert-acknowledged)."""
    from tests.support import browser

    base = f"http://127.0.0.1:{env['ZONESYNC_AIRFLOW_PORT']}"
    with browser.page() as pg:
        browser.sign_in(pg, base, "/zonesync/console/", "admin", password)
        pg.wait_for_selector("body[data-loaded]", timeout=60_000)
        _check_held_by_its_throttle(env, api, pg, base)
        _lock_and_alert_resolved_by_buttons(env, api, pg, base)


def _started_guard(env, zone: str = "a"):
    """A guard of `zone` for the test's writes (an application's, through its guard); close() it."""
    from zonesync.dal import Guard, ZoneDB
    from zonesync.meta.db import MetaConfig

    port = int(env["ZONESYNC_BASE_PORT"]) + 1 + "abc".index(zone)
    guard = Guard(MetaConfig.from_env(env), zone, ZoneDB("127.0.0.1", port, "root", "", "zonesync_app"), period=0.5)
    return guard.start()


def _zone_db(env, zone: str, autocommit: bool = True):
    import pymysql

    port = int(env["ZONESYNC_BASE_PORT"]) + 1 + "abc".index(zone)
    return pymysql.connect(host="127.0.0.1", port=port, user="root", database="zonesync_app", autocommit=autocommit)


def _one(env, zone: str, sql: str, args=()):
    conn = _zone_db(env, zone)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            row = cur.fetchone()
        return None if row is None else row[0] if len(row) == 1 else row
    finally:
        conn.close()


def _run(api, kind: str, run_id: str) -> dict | None:
    runs = api._raw("GET", f"/zonesync/api/v1/runs?kind={kind}&limit=10")[1]["runs"]
    return next((r for r in runs if r["run_id"] == run_id), None)


def _js_seconds(s: float) -> str:
    """console.js seconds(): how the page writes a duration."""
    import math

    if s < 1:
        return f"{math.floor(s * 1000 + 0.5)} ms"
    return f"{s:.1f} s" if s < 120 else f"{math.floor(s / 60 + 0.5)} min"


def _check_held_by_its_throttle(env, api, pg, base: str) -> None:
    """A check of `orders` in chunks of 100 rows, one per wave, that waits between waves while
    a zone lags more than 2 s (`max_lag_s`), started by `POST /checks`. Once it has
    checksummed a few chunks, zone b lags for real: an order is locked in b by a transaction
    left open, and a's update of 400 orders (that one among them) reaches b's applier as
    one round (b's applier stopped while a commits it, so the round is read whole and goes to
    the applier's workers): one worker waits on the lock while the applier goes on reporting
    a -> b more and more seconds behind. The check stops between two waves, running, its
    progress, rate and ETA standing still; the page shows exactly that. Released, b catches
    up and the check ends green."""
    from tests.support import browser

    updated = "SELECT COUNT(*) FROM orders WHERE order_id BETWEEN %s AND %s AND amount < 0"
    mine = (ORDERS_FROM + 1, ORDERS_FROM + 400)
    guard = _started_guard(env)
    try:  # tenant 300's orders, through zone a's guard, in transactions well within the rules' deadline
        for start in range(1, CHECK_ORDERS + 1, 250):
            with guard.transaction() as tx:
                for i in range(start, min(start + 250, CHECK_ORDERS + 1)):
                    tx.insert("orders", {"order_id": ORDERS_FROM + i, "tenant_id": 300, "amount": i})
        added = "SELECT COUNT(*) FROM orders WHERE order_id > %s"
        assert procs.wait_until(lambda: all(_one(env, z, added, (ORDERS_FROM,)) == CHECK_ORDERS for z in "abc"), 180)
        body = {"tables": ["orders"], "chunk_rows": 100, "parallel": 1, "rows": False, "max_lag_s": MAX_LAG_S,
                "reason": "e2e: the console shows a check held by lag"}  # fmt: skip
        status, doc = api._raw("POST", "/zonesync/api/v1/checks", body)
        assert status == 202 and doc["dag_id"] == "consistency_check", doc
        run_id = doc["run_id"]

        def chunks_done(n: int) -> bool:
            run = _run(api, "check", run_id)
            return bool(run and run["progress"] and run["progress"]["done"] >= n)

        assert procs.wait_until(lambda: chunks_done(3), 300, interval=0.5), _run(api, "check", run_id)
        blocker = _zone_db(env, "b", autocommit=False)
        applier_b = _pids(env)["applier-b"]
        try:
            with blocker.cursor() as cur:  # b's applier will wait on this row
                cur.execute("SELECT amount FROM orders WHERE order_id = %s FOR UPDATE", (ORDERS_FROM + 1,))
            os.kill(applier_b, signal.SIGSTOP)
            try:
                with guard.transaction() as tx:
                    for i in range(1, 401):
                        tx.update("orders", {"order_id": ORDERS_FROM + i}, {"amount": -i})
                assert procs.wait_until(lambda: _one(env, "c", updated, mine) == 400, 60), "published: c has it"
            finally:
                os.kill(applier_b, signal.SIGCONT)

            def b_lags() -> bool:
                pairs = api._raw("GET", "/zonesync/api/v1/lag")[1]["pairs"]
                return any((p["source"], p["target"]) == ("a", "b") and not p["stale"]
                           and p["behind_seconds"] > MAX_LAG_S for p in pairs)  # fmt: skip

            assert procs.wait_until(b_lags, 30, interval=0.5), api._raw("GET", "/zonesync/api/v1/lag")[1]
            last: dict = {}

            def held() -> bool:  # b lags and the check's chunks have not moved for 5 s
                p = _run(api, "check", run_id)["progress"]
                if last.get("at") != (p["done"], p["total"]):
                    last.update(at=(p["done"], p["total"]), since=time.monotonic())
                return time.monotonic() - last["since"] >= 5 and b_lags()

            assert procs.wait_until(held, 40, interval=0.5), (last, _run(api, "check", run_id))
            run = _run(api, "check", run_id)
            p = run["progress"]
            assert run["status"] == "running" and 3 <= p["done"] < p["total"], run
            assert p["rate_rows_s"] and p["eta_s"], p  # the latest stretch's pace; what is left at it
            pg.goto(base + "/zonesync/console/")
            pg.wait_for_selector("body[data-loaded]", timeout=60_000)
            cell = pg.locator(f'tr[data-run="{run_id}"] td[data-progress]')
            assert cell.get_attribute("data-progress") == f"{p['done']}/{p['total']}"
            pct = int(100 * p["done"] / p["total"] + 0.5)
            assert cell.locator(".bar > div").get_attribute("style") == f"width:{pct}%"
            shown = cell.inner_text()
            assert f"{int(p['rate_rows_s'] + 0.5)} rows/s" in shown and f"ETA {_js_seconds(p['eta_s'])}" in shown, (
                shown, p)  # fmt: skip
            assert pg.locator(f'tr[data-run="{run_id}"]').get_attribute("data-status") == "running"
            browser.screenshot(pg, "console-check-held")
            assert _run(api, "check", run_id)["progress"]["done"] == p["done"], "still held while the page was read"
        finally:
            blocker.rollback()
            blocker.close()
            os.kill(applier_b, signal.SIGCONT)
    finally:
        guard.close()
    assert api.follow("consistency_check", run_id, timeout=600) == "success"
    assert _run(api, "check", run_id)["status"] == "succeeded"
    assert _one(env, "b", updated, mine) == 400


def _lock_and_alert_resolved_by_buttons(env, api, pg, base: str) -> None:
    """Tenant T (zone a's) changed in zone b behind its applier's back, then updated in a:
    b locks the row and raises `row_locked`. Order ORDERS_FROM + 1 locked by hand (`POST
    /locks/b`). The page lists both locks with their commands and the alert with the
    command that resolves it (the tenant lock's); each *resolve* button (its confirm
    accepted) unlocks its row, b's tenant row becomes a's, and *acknowledge* closes the
    alert: gone from the API and the page."""
    from tests.support import browser

    conn = _zone_db(env, "a")
    with conn.cursor() as cur:
        cur.execute("SELECT tenant_id FROM tenants WHERE tenant_id BETWEEN 300 AND 399")
        tenant = min(set(range(300, 400)) - {row[0] for row in cur.fetchall()})  # a new tenant of zone a
    conn.close()
    guard = _started_guard(env)
    try:
        with guard.transaction() as tx:
            tx.insert("tenants", {"tenant_id": tenant, "name": "e2e v1"})
        name = "SELECT name FROM tenants WHERE tenant_id = %s"
        assert procs.wait_until(lambda: _one(env, "b", name, (tenant,)) == "e2e v1", 60)
        tamper = _zone_db(env, "b")
        try:  # an edit in b that is not replicated: b's row no longer is what a's next event says it was
            with tamper.cursor() as cur:
                cur.execute("SET SESSION skip_replication = 1")
                cur.execute("UPDATE tenants SET name = 'edited in b' WHERE tenant_id = %s", (tenant,))
        finally:
            tamper.close()
        with guard.transaction() as tx:
            tx.update("tenants", {"tenant_id": tenant}, {"name": "e2e v2"})
    finally:
        guard.close()

    def the_alert() -> dict | None:
        return next((a for a in api._raw("GET", "/zonesync/api/v1/alerts?limit=1000")[1]["alerts"]
                     if (a["zone"], a["kind"]) == ("b", "row_locked") and a["detail"].get("table") == "tenants"
                     and a["detail"].get("pk") == f"[{tenant}]"), None)  # fmt: skip

    assert procs.wait_until(the_alert, 60, interval=0.5), api._raw("GET", "/zonesync/api/v1/alerts")[1]
    alert = the_alert()
    by_hand = {"table": "orders", "pk": f"[{ORDERS_FROM + 1}]", "reason": "e2e: held by hand"}
    status, doc = api._raw("POST", "/zonesync/api/v1/locks/b", by_hand)
    assert status == 200, doc
    zones = api._raw("GET", "/zonesync/api/v1/locks")[1]["zones"]
    locked = {f"b:{lk['table']}:{json.dumps(lk['pk'])}": lk["resolve"] for z in zones if z["zone"] == "b"
              for lk in z["locks"]}  # fmt: skip
    keys = [f"b:tenants:[{tenant}]", f"b:orders:[{ORDERS_FROM + 1}]"]
    assert set(keys) <= set(locked), locked
    command = f"zonesync locks resolve --zone b --table tenants --pk '[{tenant}]'"
    assert alert["resolve"] == locked[keys[0]] == command, (alert, locked)

    pg.goto(base + "/zonesync/console/")
    pg.wait_for_selector("body[data-loaded]", timeout=60_000)
    for key in keys:
        assert pg.locator(f'tr[data-lock="{key}"] code').inner_text() == locked[key]
    row = pg.locator(f'tr[data-alert="{alert["id"]}"]')
    assert row.get_attribute("data-kind") == "row_locked"
    assert row.locator(f'code[data-alert-resolve="{alert["id"]}"]').inner_text() == command
    assert row.locator(f'[data-alert-hint="{alert["id"]}"]').inner_text() == alert["hint"]
    browser.screenshot(pg, "console-lock-and-alert")

    pg.on("dialog", lambda dialog: dialog.accept())  # the buttons' window.confirm
    for key in keys:
        pg.locator(f'button[data-resolve="{key}"]').click()
        pg.locator(f'tr[data-lock="{key}"]').wait_for(state="detached", timeout=60_000)
    left = [f"b:{lk['table']}:{json.dumps(lk['pk'])}" for z in api._raw("GET", "/zonesync/api/v1/locks")[1]["zones"]
            for lk in z["locks"] if z["zone"] == "b"]  # fmt: skip
    assert not set(keys) & set(left), left
    tenant_row = "SELECT name, _zs_origin, _zs_version FROM tenants WHERE tenant_id = %s"
    assert _one(env, "b", tenant_row, (tenant,)) == _one(env, "a", tenant_row, (tenant,)), "b took a's current row"
    assert pg.locator(f'tr[data-alert="{alert["id"]}"]').count() == 1, "resolving a lock leaves its alert open"
    browser.screenshot(pg, "console-lock-resolved")

    pg.locator(f'button[data-ack="{alert["id"]}"]').click()
    pg.locator(f'tr[data-alert="{alert["id"]}"]').wait_for(state="detached", timeout=60_000)
    assert alert["id"] not in [a["id"] for a in api._raw("GET", "/zonesync/api/v1/alerts?limit=1000")[1]["alerts"]]
    browser.screenshot(pg, "console-alert-acknowledged")
