"""A full copy survives the machine that runs it: the real Airflow scheduler, with its
task runners and the row copy's spark-submit, is killed with SIGKILL mid-copy; a new
scheduler finds the dead one's running task orphaned, resets it and runs it again, and
the new Spark job skips the chunks already done and converges (docs/copy.md: "Faults").

The kill takes the scheduler and every process under it: the LocalExecutor's workers,
the task's supervisor and task process, spark-submit and its JVM, as on a host that
died. Nothing may write to b between the kill and the new try."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from zonesync.dev import env as dev_env
from zonesync.dev import procs
from zonesync.dev.stack import full_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ZONESYNC = str(Path(sys.executable).parent / "zonesync")
ROWS = 120_000
CHUNK_ROWS = 1_000  # 120 chunks in waves of 2: a copy long enough to be killed in


def _sql(inst, *statements, fetch=False):
    conn = inst.connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
            out = cur.fetchall() if fetch else None
        conn.commit()
        return out
    finally:
        conn.close()


def _chunks(b, run_id: str) -> dict[int, object]:
    """{chunk: done_at} of the run's finished chunks in b."""
    rows = _sql(b, f"SELECT chunk_no, done_at FROM zonesync.copy_chunks WHERE run_id = '{run_id}' AND status = 'done'",
                fetch=True)  # fmt: skip
    return dict(rows)


def test_a_copy_whose_scheduler_and_task_were_killed_resumes_on_retry_and_converges(tmp_path, monkeypatch):
    # the new scheduler resets the dead one's running tasks (orphans) when it first looks
    # for them and then every orphaned_tasks_check_interval (default 300 s): 10 s here,
    # the dead scheduler counted dead after 15 s without a heartbeat (default 30 s)
    monkeypatch.setenv("AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL", "10")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "15")
    with full_stack(tmp_path / "stack", dags=("full_copy",)) as (cfg, env, api):
        a, b = dev_env.instances(cfg)[1:3]
        # rows only a holds (not published): the copy must bring every one of them to b
        _sql(a, "SET SESSION skip_replication = 1",
             "INSERT INTO orders (order_id, tenant_id, amount, status, _zs_origin, _zs_version) "
             f"SELECT seq, seq % 400, seq / 100, 'seeded', 1, 1000 + seq FROM seq_1_to_{ROWS}")  # fmt: skip
        started = subprocess.run(
            [ZONESYNC, "copy", "--from", "a", "--to", "b", "--tables", "orders", "--chunk-rows", str(CHUNK_ROWS),
             "--parallel", "2", "--reason", "e2e: scheduler killed mid-copy", "--no-follow"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        run_id = started.stdout.split()[1].rstrip(":")

        assert procs.wait_until(lambda: len(_chunks(b, run_id)) >= 20, 300, 0.2), "the row copy never got going"
        # the scheduler and everything under it: its executor's workers, the task's
        # supervisor and task process (a process group of its own), spark-submit, its JVM
        scheduler = psutil.Process(procs.read(cfg.run_dir, "scheduler").pid)
        tree = [scheduler, *scheduler.children(recursive=True)]
        assert any("spark" in " ".join(p.cmdline()) for p in tree), "the row copy's Spark job should be running"
        for p in tree:
            p.send_signal(signal.SIGKILL)
        psutil.wait_procs(tree, timeout=10)
        assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree)
        before = _chunks(b, run_id)
        time.sleep(2)  # nothing left that could still land a chunk
        assert _chunks(b, run_id) == before
        assert len(before) < ROWS // CHUNK_ROWS, "the copy finished before the kill: nothing was tested"

        dev_env.up_airflow(cfg)  # a new scheduler (the pid file names a dead process)
        state = api.follow("full_copy", run_id, timeout=600)
        assert state == "success", subprocess.run([ZONESYNC, "copy", "status", run_id], env=env,
                                                  capture_output=True, text=True).stdout  # fmt: skip

        tries = {t["task_id"]: t["try_number"] for t in api.task_instances("full_copy", run_id)}
        assert tries["row_copy"] >= 2  # the killed try failed for want of a heartbeat, a retry finished it
        after = _chunks(b, run_id)
        planned = _sql(b, f"SELECT COUNT(*) FROM zonesync.copy_chunks WHERE run_id = '{run_id}'", fetch=True)[0][0]
        assert len(after) == planned >= ROWS // CHUNK_ROWS
        # the chunks done before the kill were skipped by the retry, not copied again
        assert {n: after[n] for n in before} == before
        same = "SELECT COUNT(*), SUM(CRC32(CONCAT_WS('#', order_id, amount, status, _zs_version))) FROM orders"
        assert _sql(a, same, fetch=True) == _sql(b, same, fetch=True)
        status = subprocess.run([ZONESYNC, "copy", "status", run_id], env=env, capture_output=True, text=True)
        assert "succeeded" in status.stdout, status.stdout
