"""le_migration through Airflow's dag.test(): real zones, replication, guards, the
consistency check's Spark job.

The protocol's failure cases are covered step by step in
tests/integration/migrate/test_migration_steps.py; here: the wiring. The happy path
ends with the tenant writable in the target only, its resident rows (the stock copy's
Spark job) there and gone from the source, also when the stock copy's and the verify
check's Spark jobs are killed -9 mid-way (retried); a row that differs fails verify before
anything is stopped, the rollback ends the run and the tenant stays writable where it
was; a plan2 target that does not catch up (stopped first, verify skipped) fails the cutover
after its deferral and rolls back;
a stop-write gate that stays closed defers, times out and rolls back with nothing stopped;
a guard frozen before the stop-write fails the cutover on its ack timeout and rolls back
(S004-27); sync reads that fail mid-poll are never taken for synced and the migration
completes (S004-21); bad params are refused before any task runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.support import guard_process
from tests.support.background import wait_until
from tests.support.replication import wait_converged
from tests.support.resident import note_ids, notes_table
from tests.support.switching import wait_replication_reported
from tests.support.tcp_proxy import TcpProxy
from zonesync.check.steps import CUT_GRACE_US
from zonesync.dal import EntityWriteStopped, WrongZone
from zonesync.meta import guards
from zonesync.meta.entities import EntityRegistry
from zonesync.migrate.store import FAILED, ROLLED_BACK, SUCCEEDED, MigrationStore

pytestmark = [pytest.mark.dags, pytest.mark.integration]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "le_migration.py"
# every param a test changes, at its default: dag.test(run_conf=...) leaves a run's conf in
# the module's DAG object's params, so a later test would inherit what it did not name
CONF = {"tenant": "7", "to_zone": "b", "reason": "dag test", "ack_timeout_s": 5.0, "mode": "plan1",
        "sync_timeout_s": 120.0, "max_txn_ms": 500, "stop_window_utc": "", "gate_timeout_s": 3600.0,
        "stock_chunk_rows": 50_000}  # fmt: skip


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE)).dags["le_migration"]


@pytest.fixture
def tenant7(airflow_db, cluster, guard_env, meta):
    """Tenant 7 (its tenant LE and chat 70) registered in a, guards of a and b acking it."""
    wait_replication_reported(meta)
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
    ga, gb = guard_env("a", period=0.2), guard_env("b", period=0.2)
    version = EntityRegistry(meta).register_biz("tenant", "7", "a", [("tenant", "7"), ("chat", "70")],
                                                "test: tenant 7 in a")  # fmt: skip
    guards.wait_acks(meta, version, {"a", "b"}, 10)
    yield ga, gb
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
    meta.run("DELETE FROM biz_entities WHERE be_type = 'tenant' AND be_id = '8'")  # (the resident test's)


def _states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def _insert(guard, order_id: int) -> None:
    with guard.transaction() as tx:
        tx.insert("orders", {"order_id": order_id, "tenant_id": 7, "amount": 1})


@pytest.fixture
def notes(guard_env, zones, meta):
    """`notes` resident (tests/support/resident.py), published before the cluster starts."""
    with notes_table(zones, meta):
        yield


def test_a_tenant_migrates_to_b_with_its_resident_rows_and_only_b_writes_it_after(notes, tenant7, meta, zones, dag):
    ga, gb = tenant7
    _insert(ga, 7001)
    version = EntityRegistry(meta).register_biz("tenant", "8", "a", [("tenant", "8")], "test: tenant 8 in a")
    guards.wait_acks(meta, version, {"a", "b"}, 10)  # (a resident row needs a registered entity)
    with ga.transaction() as tx:
        for n in range(1, 41):
            tx.insert("notes", {"note_id": n, "tenant_id": 7, "body": "x"})
        tx.insert("notes", {"note_id": 99, "tenant_id": 8, "body": "stays in a"})
    run = dag.test(run_conf=CONF)
    states = _states(run)
    assert run.state == "success", states
    assert states["rollback"] == "skipped" and states["cutover"] == states["report"] == "success"
    assert states["admit"] == states["stock"] == states["release"] == "success", states
    assert note_ids(zones["b"]) == set(range(1, 41)) and note_ids(zones["a"]) == {99}, "notes moved with tenant 7"
    mig = MigrationStore(meta).require(run.run_id)
    assert (mig.status, mig.phase, mig.source_zone, mig.target_zone) == (SUCCEEDED, "lifted", "a", "b")
    assert mig.window_ms is not None and mig.window_ms > 0
    biz, les = EntityRegistry(meta).biz("tenant", "7")
    assert biz.zone == "b" and {(le.zone, le.stop_write) for le in les} == {("b", False)}
    guards.wait_acks(meta, mig.lift_version, {"a", "b"}, 10)
    _insert(gb, 7002)
    with pytest.raises(WrongZone, match="owned by zone b"):
        _insert(ga, 7003)
    wait_converged(zones, ("orders",), timeout=60)


def test_a_stock_copy_killed_mid_way_is_retried_and_lands_only_the_chunks_left(notes, tenant7, meta, zones, dag):
    """The stock copy's Spark job killed -9 (spark-submit and its JVM) after a few chunks
    landed: the task fails, Airflow retries it, the new job skips the chunks done (their
    commit times unchanged); then the verify check's Spark job killed -9 once its plan is
    stored: verify_check fails, is retried and its new job goes on with the same check run
    (no false difference from the kill). The migration ends with every note in b and none
    in a; tenant 7 writable in b only."""
    ga, gb = tenant7
    with ga.transaction() as tx:
        for n in range(1, 2001):
            tx.insert("notes", {"note_id": n, "tenant_id": 7, "body": f"n{n}"})
    earlier = _stock_runs(zones["b"])
    killed: dict = {}
    killer = threading.Thread(target=_kill_reporting_errors, args=(zones["b"], meta, earlier, killed), daemon=True)
    killer.start()
    run = dag.test(run_conf={**CONF, "stock_chunk_rows": 100})  # about 20 chunks, waves of 4
    killer.join(10)
    states = _states(run)
    assert run.state == "success", (states, killed)
    assert killed.get("pids"), f"the stock job was never killed: {killed}"
    tries = {ti.task_id: ti.try_number for ti in run.get_task_instances()}
    assert tries["stock"] >= 2, tries
    assert killed.get("verify_pids") and tries["verify_check"] >= 2, (tries, killed)
    check = meta.run("SELECT status FROM checks WHERE run_id = %s", (f"{run.run_id}.verify",))[0]
    assert check and check[0][0] == "succeeded", check  # the re-run finished the same check run
    after = _done_chunks(zones["b"], killed["run_id"])
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.copy_chunks WHERE run_id = %s", (killed["run_id"],))
        planned = cur.fetchone()[0]
    assert len(after) == planned >= 20 and len(killed["done"]) < planned, (planned, len(killed["done"]))
    assert {n: after[n] for n in killed["done"]} == killed["done"], "chunks done before the kill were copied again"
    assert note_ids(zones["b"]) == set(range(1, 2001)) and note_ids(zones["a"]) == set()
    mig = MigrationStore(meta).require(run.run_id)
    assert (mig.status, mig.phase) == (SUCCEEDED, "lifted")
    guards.wait_acks(meta, mig.lift_version, {"a", "b"}, 10)
    _insert(gb, 7401)
    with pytest.raises(WrongZone, match="owned by zone b"):
        _insert(ga, 7402)


def _stock_runs(b) -> set[str]:
    with b.connect().cursor() as cur:
        cur.execute("SELECT DISTINCT run_id FROM zonesync.copy_chunks WHERE run_id LIKE '%.stock'")
        return {r[0] for r in cur.fetchall()}


def _done_chunks(b, run_id: str) -> dict[int, object]:
    with b.connect().cursor() as cur:
        cur.execute("SELECT chunk_no, done_at FROM zonesync.copy_chunks WHERE run_id = %s AND status = 'done'",
                    (run_id,))  # fmt: skip
        return dict(cur.fetchall())


def _kill_reporting_errors(b, meta, earlier: set[str], killed: dict) -> None:
    """The killer thread: its error goes into the test's assertion message, not a stray warning."""
    import traceback

    try:
        _kill_the_stock_job(b, earlier, killed)
        if killed.get("pids"):
            _kill_the_verify_job(meta, killed)
    except Exception:  # noqa: BLE001 - reported by the test
        killed["error"] = traceback.format_exc()


def _kill_tree(script: str) -> list:
    """SIGKILL every process of this test's children running `script`, and theirs; the
    processes killed, once ended (waited for without reaping them: psutil's wait() would
    reap spark-submit, a child of this process under dag.test(), and the hook's
    Popen.wait() would then read its exit as 0, ECHILD)."""
    import psutil

    def cmdline(p) -> str:
        try:
            return " ".join(p.cmdline())
        except psutil.Error:  # a child that ended between listing and reading (a probe, a finished task)
            return ""

    jobs = [p for p in psutil.Process().children(recursive=True) if script in cmdline(p)]
    tree = []
    for p in jobs:
        try:
            tree += [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass
    wait_until(lambda: all(_dead(p) for p in tree), 10, f"the killed {script} processes ended", step=0.02)
    return tree


def _kill_the_verify_job(meta, killed: dict) -> None:
    """Once the verify check's plan is stored (its job's session is starting, or its
    checksums run): SIGKILL its spark-submit and JVM, once."""
    verify = f"{killed['run_id'].removesuffix('.stock')}.verify"

    def planned() -> bool:
        return bool(meta.run("SELECT 1 FROM check_chunks WHERE run_id = %s LIMIT 1", (verify,))[0])

    if wait_until(planned, 240, "the verify check planned its chunks", must=False, step=0.02):
        killed["verify_pids"] = [p.pid for p in _kill_tree("consistency_check.py")]


def _kill_the_stock_job(b, earlier: set[str], killed: dict) -> None:
    """Once this run's stock copy has landed 4 chunks: SIGKILL its spark-submit and JVM."""

    def landed() -> str | None:
        for run_id in _stock_runs(b) - earlier:
            if len(_done_chunks(b, run_id)) >= 4:
                return run_id
        return None

    run_id = wait_until(landed, 240, "the stock copy landed 4 chunks", must=False, step=0.02)
    if not run_id:
        return

    tree = _kill_tree("full_copy.py")
    killed.update(run_id=run_id, done=_done_chunks(b, run_id), pids=[p.pid for p in tree])


def _dead(p) -> bool:
    """Whether a process ended (a zombie counts), without reaping it."""
    import psutil

    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_row_that_differs_rolls_back_and_the_tenant_stays_writable_in_a(tenant7, meta, zones, dag):
    ga, gb = tenant7
    _insert(ga, 7101)
    written = time.time()
    wait_converged(zones, ("orders",), timeout=60)
    with zones["b"].connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # behind replication's back
        cur.execute("UPDATE orders SET amount = 9 WHERE order_id = 7101")
        conn.commit()
    time.sleep(max(0.0, written + CUT_GRACE_US / 1e6 + 0.1 - time.time()))  # older than verify's cut (see steps tests)
    try:
        run = dag.test(run_conf=CONF)
        states = _states(run)
        assert run.state == "failed", states
        assert states["verify"] == "failed" and states["rollback"] == "success", states
        assert states["cutover"] == states["report"] == "upstream_failed", states
        mig = MigrationStore(meta).require(run.run_id)
        assert mig.status == FAILED and mig.stop_version is None, mig
        assert mig.detail.startswith("refused before any push: verify: 1 rows differ, e.g. ['orders[7101]: b amount")
        biz, les = EntityRegistry(meta).biz("tenant", "7")
        assert biz.zone == "a" and {(le.zone, le.stop_write) for le in les} == {("a", False)}
        wait_until(lambda: _accepted(ga, 7102), 10, "a accepts tenant 7 again")
        with pytest.raises((WrongZone, EntityWriteStopped)):
            _insert(gb, 7103)
    finally:
        with zones["b"].connect("zonesync_app") as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("UPDATE orders SET amount = 1 WHERE order_id = 7101")
            conn.commit()


def _accepted(guard, order_id: int) -> bool:
    try:
        _insert(guard, order_id)
    except EntityWriteStopped:
        return False
    return True


def test_a_plan2_target_that_never_catches_up_fails_the_cutover_and_rolls_back(tenant7, cluster, meta, dag):
    """plan2 (stop_first stops tenant 7 before anything is copied; verify skipped: the final
    check compares with writes stopped). applier-b stopped once the stop-write is acked: b
    never applies a's stream up to P; the cutover waits in the worker, defers, times out in
    its trigger, and the rollback leaves tenant 7 writable in a."""
    ga, _ = tenant7
    stopper = threading.Thread(target=_stop_applier_after_the_stop, args=(meta, cluster, ga), daemon=True)
    stopper.start()
    try:
        run = dag.test(run_conf={**CONF, "mode": "plan2", "sync_timeout_s": 7, "max_txn_ms": 3000})
    finally:
        stopper.join(120)
        cluster.start(which=("applier",), zones=("b",))
    states = _states(run)
    assert run.state == "failed" and states["cutover"] == "failed" and states["rollback"] == "success", states
    assert states["stop_first"] == "success" and states["verify_check"] == "skipped", states
    assert states["verify"] == states["gate"] == "success" and states["report"] == "upstream_failed", states
    mig = MigrationStore(meta).require(run.run_id)
    assert mig.status == ROLLED_BACK and mig.position is not None, mig
    assert "synced: zone b did not apply zone a's stream up to P within 7 s" in mig.detail, mig.detail
    assert "writable in a again" in mig.detail
    assert {le.stop_write for le in EntityRegistry(meta).biz("tenant", "7")[1]} == {False}


def test_a_stop_write_gate_that_stays_closed_rolls_back_with_nothing_stopped(tenant7, meta, dag):
    """S004-15: a stop window that excludes now keeps the gate closed; it defers, its
    trigger times out, and the rollback ends the run with tenant 7 never stopped."""
    import datetime

    ga, _ = tenant7
    hour = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)).hour
    window = f"{hour:02d}:00-{(hour + 1) % 24:02d}:00"
    run = dag.test(run_conf={**CONF, "stop_window_utc": window, "gate_timeout_s": 2})
    states = _states(run)
    assert run.state == "failed" and states["gate"] == "failed" and states["rollback"] == "success", states
    assert states["cutover"] == "upstream_failed", states
    mig = MigrationStore(meta).require(run.run_id)
    assert mig.status == FAILED and mig.stop_version is None, mig
    assert "gate: the stop-write gate stayed closed for" in mig.detail and f"outside the stop-write window {window}" \
        in mig.detail, mig.detail  # fmt: skip
    _insert(ga, 7301)  # never stopped


def _stop_applier_after_the_stop(meta, cluster, guard) -> None:
    """Once the stop-write is acked (phase stopped; P is read max_txn_ms = 3 s later):
    applier-b stopped, then a write of another tenant that b must apply to reach P."""
    wait_until(lambda: meta.run("SELECT COUNT(*) FROM migrations WHERE phase = 'stopped'")[0][0][0] > 0, 180,
               "the stop-write acked", step=0.02)  # fmt: skip
    cluster.stop("applier-b")
    with guard.transaction() as tx:
        tx.insert("orders", {"order_id": 7201, "tenant_id": 9, "amount": 1})


def test_a_guard_that_never_acks_the_stop_write_rolls_back_and_the_tenant_stays_writable_in_a(
    tenant7, meta, zones, dag
):  # fmt: skip
    """S004-27: a second guard of zone a (its own process) frozen with SIGSTOP once verify
    passed, registered and healthy by its last heartbeat: the cutover's stop_write waits
    ack_timeout_s for it and fails at once naming it; the rollback lifts the stop in a (the
    frozen one, unhealthy by then, is not waited for); the run fails with that reason, nothing
    flipped; a writes tenant 7 again and b refuses it. Resumed, the frozen guard catches up
    through its keepalive and accepts tenant 7's writes in a."""
    ga, gb = tenant7
    proc, instance = guard_process.spawn(meta, zones, "a", 0.3, writes=True)
    try:
        freezer = threading.Thread(target=_freeze_once_verified, args=(meta, proc), daemon=True)
        freezer.start()
        run = dag.test(run_conf={**CONF, "ack_timeout_s": 1.5})
        freezer.join(5)
        states = _states(run)
        assert run.state == "failed", states
        assert states["verify"] == states["gate"] == "success" and states["cutover"] == "failed", states
        assert states["rollback"] == "success" and states["release"] == states["report"] == "upstream_failed", states
        tries = {ti.task_id: ti.try_number for ti in run.get_task_instances()}
        assert tries["cutover"] == 1, tries  # an ack timeout fails for good: no retry keeps the tenant stopped
        mig = MigrationStore(meta).require(run.run_id)
        assert (mig.status, mig.phase, mig.flip_version) == (ROLLED_BACK, "rolling_back", None), mig
        said = re.fullmatch(rf"stop_write: version {mig.stop_version} not acked within 1\.5 s by: "
                            rf"{re.escape(instance)} \(zone a, runs v(\d+)\); writable in a again \(v(\d+)\)",
                            mig.detail)  # fmt: skip
        assert said, mig.detail  # the frozen guard, and only it, named
        ran, rollback_version = int(said[1]), int(said[2])
        assert ran < mig.stop_version < rollback_version
        biz, les = EntityRegistry(meta).biz("tenant", "7")
        assert biz.zone == "a" and {(le.zone, le.stop_write) for le in les} == {("a", False)}
        wait_until(lambda: _accepted(ga, 7501), 10, "a accepts tenant 7 again")
        with pytest.raises(WrongZone, match="owned by zone a"):
            _insert(gb, 7502)
        os.kill(proc.pid, signal.SIGCONT)
        wait_until(lambda: _version_applied(meta, instance) >= rollback_version, 10, "the resumed guard caught up")
        assert guard_process.insert(proc, "orders", {"order_id": 7503, "tenant_id": 7, "amount": 1}) == "ok"
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def _freeze_once_verified(meta, proc) -> None:
    """SIGSTOP the guard once verify passed (phase checked), before the cutover stops writes."""
    if wait_until(lambda: meta.run("SELECT COUNT(*) FROM migrations WHERE phase = 'checked'")[0][0][0] > 0, 120,
                  "verify passed", must=False, step=0.02):  # fmt: skip
        os.kill(proc.pid, signal.SIGSTOP)


def _version_applied(meta, instance: str) -> int:
    rows, _ = meta.run("SELECT version_applied FROM guard_instances WHERE instance_id = %s", (instance,))
    return int(rows[0][0]) if rows else 0


def test_a_sync_wait_whose_reads_fail_mid_poll_is_not_fooled_and_the_migration_completes(
    tenant7, cluster, meta, zones, dag, monkeypatch
):  # fmt: skip
    """S004-21: synced, the "last data ack" of a migration, is a read of meta (the
    checkpoint covering P) and of the target's apply_state, polled in the worker and then in
    MigrationSyncedTrigger. The DAG's meta and zone b connections go through TCP proxies;
    applier-b is stopped once the stop-write is acked, so b stays behind P. While it waits:
    meta unreachable during the worker's poll (the cutover fails and Airflow retries it: the
    step is idempotent, P is kept); then, in the trigger, its kept connection to b killed on
    the server (KILL CONNECTION; it connects again) and meta unreachable for a second. No
    poll reports synced meanwhile; applier-b started, the wait ends and the tenant moves.
    (plan2: no Spark job before the cutover; the wait is the same in both modes.)"""
    ga, gb = tenant7
    proxies = {"meta": TcpProxy(meta.port).start(), "b": TcpProxy(zones["b"].port).start()}
    for conn_id, proxy in (("ZONESYNC_META", proxies["meta"]), ("ZONESYNC_ZONE_B", proxies["b"])):
        conn = json.loads(os.environ[f"AIRFLOW_CONN_{conn_id}"])
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id}", json.dumps({**conn, "port": proxy.port}))
    seen: dict = {"phases": set()}
    faults = threading.Thread(target=_faults_reporting_errors, args=(meta, cluster, ga, zones, proxies, seen),
                              daemon=True)  # fmt: skip
    faults.start()
    try:
        run = dag.test(run_conf={**CONF, "mode": "plan2", "sync_timeout_s": 60, "max_txn_ms": 3000})
    finally:
        faults.join(60)
        for proxy in proxies.values():
            proxy.cut()
        if "applier-b" not in cluster.threads:
            cluster.start(which=("applier",), zones=("b",))
    states = _states(run)
    assert run.state == "success", (states, seen)
    assert "error" not in seen and seen.get("restarted"), seen
    tries = {ti.task_id: ti.try_number for ti in run.get_task_instances()}
    assert tries["cutover"] == 2 and states["rollback"] == "skipped", (tries, states)  # the worker's fault: retried
    assert seen["killed"] != seen["reconnected"], seen  # the trigger's fault: it connected again
    assert seen["phases"] == {"stopped"}, seen  # nothing said synced while b was behind P
    mig = MigrationStore(meta).require(run.run_id)
    assert (mig.status, mig.phase) == (SUCCEEDED, "lifted"), mig
    biz, les = EntityRegistry(meta).biz("tenant", "7")
    assert biz.zone == "b" and {(le.zone, le.stop_write) for le in les} == {("b", False)}
    with zones["b"].connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM orders WHERE order_id = 7201")  # written before P, applied before the flip
        assert cur.fetchone()[0] == 1
    guards.wait_acks(meta, mig.lift_version, {"a", "b"}, 10)
    _insert(gb, 7602)
    with pytest.raises(WrongZone, match="owned by zone b"):
        _insert(ga, 7603)


def _faults_reporting_errors(meta, cluster, guard, zones, proxies, seen: dict) -> None:
    """The fault thread: its error goes into the test's assertion message."""
    import traceback

    try:
        _faults(meta, cluster, guard, zones, proxies, seen)
    except Exception:  # noqa: BLE001 - reported by the test
        seen["error"] = traceback.format_exc()


def _faults(meta, cluster, guard, zones, proxies, seen: dict) -> None:
    _stop_applier_after_the_stop(meta, cluster, guard)  # b cannot reach P from here on
    wait_until(lambda: meta.run("SELECT COUNT(*) FROM migrations WHERE position_json IS NOT NULL")[0][0][0] > 0, 60,
               "P recorded (the worker polls synced from now on)", step=0.01)  # fmt: skip
    _outage(proxies["meta"], 0.5, meta, seen)  # the worker's poll fails: the cutover fails, to be retried
    seen["killed"] = _kept_connection(zones["b"], proxies["b"], 60, meta, seen)  # the trigger's, open between polls
    with zones["b"].connect() as conn, conn.cursor() as cur:
        cur.execute(f"KILL CONNECTION {seen['killed']}")
    seen["reconnected"] = _kept_connection(zones["b"], proxies["b"], 10, meta, seen)
    _outage(proxies["meta"], 1.0, meta, seen)  # the trigger's polls fail at meta
    _phase(meta, seen)
    cluster.start(which=("applier",), zones=("b",))
    seen["restarted"] = True


def _phase(meta, seen: dict) -> None:
    """The run's phase now (meta read directly, not through the proxy), kept in seen."""
    rows, _ = meta.run("SELECT phase, flip_version FROM migrations")
    seen["phases"] |= {phase if flip is None else f"{phase} (flipped)" for phase, flip in rows}


def _outage(proxy, seconds: float, meta, seen: dict) -> None:
    proxy.cut()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _phase(meta, seen)
        time.sleep(0.05)
    proxy.restore()


def _kept_connection(b, proxy, timeout: float, meta, seen: dict) -> int:
    """The id (on b's server) of a proxied connection open for a second: the trigger's (the
    worker's polls open one each and close it at once)."""
    first_seen: dict[int, float] = {}

    def kept() -> int | None:
        _phase(meta, seen)
        ports = proxy.upstream_ports()
        with b.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE HOST LIKE '127.0.0.1:%'")
            live = {int(i) for i, host in cur.fetchall() if int(host.rsplit(":", 1)[1]) in ports}
        now = time.monotonic()
        for i in set(first_seen) - live:
            del first_seen[i]
        for i in live:
            first_seen.setdefault(i, now)
        return next((i for i, t in first_seen.items() if now - t >= 1.0), None)

    return wait_until(kept, timeout, "a connection to b kept between polls", step=0.1)


@pytest.mark.parametrize(
    ("conf", "field"),
    [({"tenant": ""}, "tenant"), ({"to_zone": "B;drop"}, "to_zone"), ({"mode": "dual-write"}, "mode"),
     ({"reason": ""}, "reason"), ({"stop_window_utc": "2-4"}, "stop_window_utc"),
     ({"plan2_max_rows": -1}, "plan2_max_rows")],
)  # fmt: skip
def test_bad_params_are_refused_before_anything_runs(airflow_db, meta, dag, conf, field):
    from airflow.sdk.definitions.param import ParamValidationError

    head = EntityRegistry(meta).head()
    with pytest.raises(ParamValidationError, match=field):
        dag.test(run_conf={**CONF, **conf})
    assert EntityRegistry(meta).head() == head
