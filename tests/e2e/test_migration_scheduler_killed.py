"""A migration survives the machine that runs its cutover: the real Airflow scheduler,
with its task runners, is killed with SIGKILL while the le_migration run's cutover task
waits for a guard's ack of the stop-write (the tenant stopped in every zone); a new
scheduler finds the task orphaned and runs it again, the retry publishes nothing new
(the stop version is the run's, recorded once) and, once the guard acks, the tenant moves
and only its new zone writes it (docs/migration.md, "Running it")."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from zonesync.dev import env as dev_env
from zonesync.dev import procs
from zonesync.dev.stack import full_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ZONESYNC = str(Path(sys.executable).parent / "zonesync")


def _zs(env, *args, timeout=120):
    return subprocess.run([ZONESYNC, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_a_cutover_whose_scheduler_was_killed_while_it_waited_for_an_ack_is_retried_and_moves_the_tenant(
    tmp_path, monkeypatch
):
    from zonesync.dal import EntityWriteStopped, Guard, WrongZone, ZoneDB
    from zonesync.meta import guards
    from zonesync.meta.db import MetaConfig
    from zonesync.meta.entities import EntityRegistry
    from zonesync.migrate.store import MigrationStore

    # the new scheduler resets the dead one's running tasks when it first looks, then every
    # 10 s; the dead one counts as dead after 15 s without a heartbeat (as the copy's test)
    monkeypatch.setenv("AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL", "10")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "15")
    with full_stack(tmp_path / "stack", dags=("le_migration",)) as (cfg, env, api):
        meta = MetaConfig.from_env(env)
        registered = _zs(env, "entity", "register", "tenant", "42", "--zone", "a", "--le", "tenant:42", "--le",
                         "chat:9001", "--reason", "e2e: a tenant to move")  # fmt: skip
        assert registered.returncode == 0, registered.stdout + registered.stderr
        zones = {z.name: z.port for z in cfg.zones}
        # an application's guards in a and b: a's (a long period: healthy all along) is held
        held = threading.Event()
        guard_a = Guard(meta, "a", ZoneDB("127.0.0.1", zones["a"], "root", "", "zonesync_app"), period=10.0)
        guard_b = Guard(meta, "b", ZoneDB("127.0.0.1", zones["b"], "root", "", "zonesync_app"), period=0.5)
        guard_a.start(), guard_b.start()
        try:
            guards.wait_acks(meta, EntityRegistry(meta).head(), {"a", "b"}, 30)
            sync = guard_a._sync
            guard_a._sync = lambda: (held.wait(), sync())  # its acks held from now on
            time.sleep(0.5)
            started = _zs(env, "migrate", "--tenant", "42", "--to", "b", "--reason", "e2e: scheduler killed",
                          "--ack-timeout", "300", "--no-follow")  # fmt: skip
            assert started.returncode == 0, started.stdout + started.stderr
            run_id = started.stdout.split()[1].rstrip(":")  # "migrate RUN_ID: tenant 42 -> b (plan1)"
            store = MigrationStore(meta)

            def waiting_for_the_ack() -> bool:
                run = store.get(run_id)
                return run is not None and run.stop_version is not None and run.phase != "stopped"

            assert procs.wait_until(waiting_for_the_ack, 300, 0.2), store.get(run_id)
            stop_version = store.get(run_id).stop_version
            scheduler = psutil.Process(procs.read(cfg.run_dir, "scheduler").pid)
            tree = [scheduler, *scheduler.children(recursive=True)]
            assert len(tree) >= 2, tree  # the scheduler and what runs under it (the cutover's task among them)
            for p in tree:
                p.send_signal(signal.SIGKILL)
            psutil.wait_procs(tree, timeout=10)
            head = EntityRegistry(meta).head()
            held.set()  # the guard acks the stop now: only a retry of the cutover can go on
            time.sleep(2)
            assert EntityRegistry(meta).head() == head and store.get(run_id).flip_version is None
            with pytest.raises(EntityWriteStopped):
                guard_a.state.decide_entity("tenant", "42")

            dev_env.up_airflow(cfg)  # a new scheduler (the pid file names a dead process)
            assert api.follow("le_migration", run_id, timeout=600) == "success", _zs(env, "migrate", "status",
                                                                                      run_id).stdout  # fmt: skip
            tries = {t["task_id"]: t["try_number"] for t in api.task_instances("le_migration", run_id)}
            assert tries["cutover"] >= 2, tries  # the killed try was reset, a retry finished it
            run = store.get(run_id)
            assert run.status == "succeeded" and run.stop_version == stop_version, run
            guards.wait_acks(meta, run.lift_version, {"a", "b"}, 30)
            assert guard_b.state.decide_entity("tenant", "42").entity == ("tenant", "42")
            with pytest.raises(WrongZone, match="owned by zone b"):
                guard_a.state.decide_entity("chat", "9001")
        finally:
            held.set()
            guard_a.close()
            guard_b.close()
