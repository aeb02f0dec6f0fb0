"""The audit's actor of a DAG run is the authenticated triggering user (issue 24, item 7)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.unit


def _run(user=None, conf=None, run_type="manual"):
    return SimpleNamespace(triggering_user_name=user, conf=conf, run_type=run_type)


def test_the_authenticated_user_is_the_actor_and_a_conf_claim_cannot_replace_it():
    from zonesync_airflow.operators.actor import run_actor

    assert run_actor(_run("alice")) == "alice"
    assert run_actor(_run("alice", {"actor": "root"})) == "alice (for root)"
    assert run_actor(_run("alice", {"actor": "alice"})) == "alice"


def test_runs_without_a_triggering_user():
    from zonesync_airflow.operators.actor import run_actor

    assert run_actor(_run(run_type="scheduled")) == "schedule"
    assert run_actor(_run(conf={"actor": "bob"})) == "airflow (for bob)"
    assert run_actor(_run("alice", {"actor": "x" * 500})) == f"alice (for {'x' * 64})"
