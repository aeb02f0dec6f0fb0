"""zone_switch through Airflow's dag.test(): real zones, replication threads, guards.

The protocol's failure cases are covered step by step in
tests/integration/switch/test_switch_steps.py; here: the wiring. The happy path ends
with the new owner ACTIVE; a push nobody acks ends in rollback and a failed run;
wait_sync defers to its trigger until the applier catches up; bad params are
refused before any task runs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.support import guard_process
from tests.support.background import wait_until
from tests.support.switching import wait_replication_reported
from zonesync.meta.store import MetaStore
from zonesync.rules.extract import RuleIndex
from zonesync.switch.store import ROLLED_BACK, SUCCEEDED, SwitchStore

pytestmark = [pytest.mark.dags, pytest.mark.integration]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "zone_switch.py"
CONF = {"zsids": "0-99", "from_zone": "a", "to_zone": "b", "reason": "dag test", "ack_timeout_s": 2.0}


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE)).dags["zone_switch"]


@pytest.fixture
def ready(airflow_db, cluster, guard_env, meta):
    wait_replication_reported(meta)
    yield cluster
    for holder, *_ in SwitchStore(meta).leases():
        SwitchStore(meta).release_lease(holder)


def _owner(meta, zsid: int) -> tuple[str, str]:
    rule = RuleIndex(MetaStore(meta).rules_at()[1]).rule_for(zsid)
    return rule.zone, rule.status


def _states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_switch_runs_to_active(ready, guard_env, meta, dag):
    guard_env("a", period=0.2), guard_env("b", period=0.2)
    run = dag.test(run_conf={**CONF, "max_txn_ms": 300})
    assert run.state == "success", _states(run)
    assert _owner(meta, 5) == ("b", "ACTIVE") and _owner(meta, 100) == ("a", "ACTIVE")
    sw = SwitchStore(meta).require(run.run_id)
    assert sw.status == SUCCEEDED and sw.window_ms is not None
    steps = [s["step"] for s in SwitchStore(meta).steps(sw.id)]
    assert steps == [*("preflight record_state block reshard sync_position wait_sync activate verify_start "
                       "verify").split()]  # fmt: skip
    assert set(_states(run)) == {*("preflight record_state block reshard wait_sync activate verify_start verify_check "
                                   "verify rollback").split()}  # fmt: skip
    assert _states(run)["rollback"] == "skipped"


def test_unacked_block_rolls_back_and_the_run_fails(ready, guard_env, meta, zones, dag):
    guard_env("a", period=0.2)
    proc, instance = guard_process.spawn(meta, zones, "b", 0.3)
    try:
        original = MetaStore(meta).rules_at()[1].to_doc()
        # frozen as block starts, still healthy by its last heartbeat: block's push is never acked
        freezer = threading.Thread(target=_freeze_when_blocking, args=(meta, proc, _last_switch(meta)), daemon=True)
        freezer.start()
        run = dag.test(run_conf={**CONF, "ack_timeout_s": 1.0})
        states = _states(run)
        assert run.state == "failed", states
        assert states["block"] == "failed" and states["rollback"] == "success"
        # gated on block's stamp, which never came: not run; activate fails so the run does
        assert states["reshard"] == states["wait_sync"] == "skipped"
        assert states["activate"] == "failed" and states["verify"] == "upstream_failed"
        sw = SwitchStore(meta).require(run.run_id)
        assert sw.status == ROLLED_BACK and instance in sw.detail and "block" in sw.detail
        assert MetaStore(meta).rules_at()[1].to_doc() == original
        assert SwitchStore(meta).leases() == []
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def _last_switch(meta) -> int:
    rows, _ = meta.run("SELECT COALESCE(MAX(id), 0) FROM switches")
    return int(rows[0][0])


def _wait_for_step(meta, step: str, last_switch: int, poll: float, timeout: float = 60) -> bool:
    """Until this run's `step` has a record; earlier tests' runs have one too, hence `last_switch`."""

    def recorded() -> bool:
        rows, _ = meta.run("SELECT COUNT(*) FROM switch_steps WHERE step = %s AND switch_id > %s", (step, last_switch))
        return bool(rows[0][0])

    return wait_until(recorded, timeout, f"{step} recorded", must=False, step=poll)


def _freeze_when_blocking(meta, proc, last_switch: int) -> None:
    # the DAG starts block with the gated tasks in any order (dag.test()): wait for this run's block
    if _wait_for_step(meta, "block", last_switch, poll=0.005):
        os.kill(proc.pid, signal.SIGSTOP)


def _restart_applier_after_inline_wait(meta, cluster, last_switch: int) -> None:
    """Start applier-b 6 s after wait_sync began waiting: past the sensor's 5 s in the worker."""
    _wait_for_step(meta, "wait_sync", last_switch, poll=0.05)
    time.sleep(6.0)
    cluster.start(which=("applier",), zones=("b",))


def test_wait_sync_defers_until_the_applier_catches_up(ready, guard_env, meta, dag):
    ga = guard_env("a", period=0.2)
    guard_env("b", period=0.2)
    ready.stop("applier-b")
    with ga.transaction() as tx:  # something b must apply before it reaches P
        tx.insert("tenants", {"tenant_id": 300, "name": "behind"})
    restarter = threading.Thread(
        target=_restart_applier_after_inline_wait, args=(meta, ready, _last_switch(meta)), daemon=True
    )
    restarter.start()
    try:
        run = dag.test(run_conf={**CONF, "max_txn_ms": 100, "lag_threshold_s": 60})
    finally:
        restarter.join(90)
    assert run.state == "success", _states(run)
    sw = SwitchStore(meta).require(run.run_id)
    wait = next(s for s in SwitchStore(meta).steps(sw.id) if s["step"] == "wait_sync")
    assert wait["status"] == "ok" and wait["detail"].startswith("synced after") and "worker" not in wait["detail"], wait


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"zsids": "abc"}, "zsids"),
        ({"from_zone": "A;drop"}, "from_zone"),
        ({"reason": ""}, "reason"),
        ({"ack_timeout_s": 0}, "ack_timeout_s"),
    ],
)
def test_bad_params_are_refused_before_anything_runs(airflow_db, meta, dag, conf, field):
    from airflow.sdk.definitions.param import ParamValidationError

    head = MetaStore(meta).head()
    with pytest.raises(ParamValidationError, match=field):
        dag.test(run_conf={**CONF, **conf})
    assert MetaStore(meta).head() == head
