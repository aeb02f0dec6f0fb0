"""The console's HTTP API in-process (FastAPI's TestClient) on the test env's meta and zones.

Airflow's authentication is the one part replaced here (its `get_user` needs Airflow's
api-server and a signed token): the e2e test of the dev environment checks a real
api-server refuses calls without a token and serves these routes with one."""

from __future__ import annotations

import pytest

PREFIX = "console-test-"


@pytest.fixture
def api(meta):
    from fastapi.testclient import TestClient

    from zonesync_airflow.api import app
    from zonesync_airflow.api.auth import airflow_user

    app.dependency_overrides[airflow_user] = lambda: {"user": "tester"}
    with TestClient(app) as client:
        yield client
    app.dependency_overrides.clear()


@pytest.fixture
def runs_cleanup(meta):
    """Every run a test adds is named PREFIX...; they are removed afterwards (other tests
    read the histories, and a 'running' copy or migration would refuse theirs)."""
    yield
    for table in ("switches", "copies", "checks", "migrations"):
        meta.run(f"DELETE FROM {table} WHERE run_id LIKE %s", (PREFIX + "%",))
    meta.run("DELETE FROM check_chunks WHERE run_id LIKE %s", (PREFIX + "%",))
