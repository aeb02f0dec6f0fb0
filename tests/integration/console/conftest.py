"""The console's HTTP API in-process (FastAPI's TestClient) on the test env's meta and zones.

`api` calls as an admin: Airflow's authentication (`get_user`, a signed token checked
against Airflow's DB) is the one part replaced, the roles are still asked of the real
auth manager (the simple one, as configured). `api_as(role)` calls with a real token of
that role, nothing replaced (test_console_roles.py); the e2e test of the dev environment
does the same on a real api-server."""

from __future__ import annotations

import pytest

PREFIX = "console-test-"


@pytest.fixture(scope="session")
def auth_manager():
    """Airflow's configured auth manager, as the api-server creates it (its `init` only
    writes the password file)."""
    from airflow.api_fastapi.app import create_auth_manager

    return create_auth_manager()


@pytest.fixture
def api(meta, auth_manager):
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from zonesync_airflow.api import app
    from zonesync_airflow.api.auth import airflow_user

    app.dependency_overrides[airflow_user] = lambda: SimpleAuthManagerUser(username="tester", role="admin")
    with TestClient(app) as client:
        yield client
    app.dependency_overrides.clear()


@pytest.fixture
def api_as(meta, auth_manager, airflow_db):
    """`api_as(role)`: a client holding a token the auth manager signed for a user of that
    role (None: no role), checked as the api-server checks it (its revoked tokens in
    Airflow's DB)."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from zonesync_airflow.api import app

    clients = []

    def client(role: str | None):
        token = auth_manager.generate_jwt(SimpleAuthManagerUser(username=f"{role}-tester", role=role))
        clients.append(TestClient(app, headers={"Authorization": f"Bearer {token}"}))
        return clients[-1]

    yield client
    for c in clients:
        c.close()


@pytest.fixture
def runs_cleanup(meta):
    """Every run a test adds is named PREFIX...; they are removed afterwards (other tests
    read the histories, and a 'running' copy or migration would refuse theirs)."""
    yield
    for table in ("switches", "copies", "checks", "migrations"):
        meta.run(f"DELETE FROM {table} WHERE run_id LIKE %s", (PREFIX + "%",))
    meta.run("DELETE FROM check_chunks WHERE run_id LIKE %s", (PREFIX + "%",))
