"""Airflow's roles on the console's HTTP API, asked of the real auth manager (the simple
one, as airflow.cfg configures it) with real tokens it signed, checked as the api-server
checks them: every role from viewer up reads; acknowledging an alert, locking a row and
resolving one need edit rights on the connection written through (op, admin). A refusal
is 403 with one line naming the permission, before the body is read, and changes nothing.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

READS = ("/api/v1/zones", "/api/v1/rules", "/api/v1/lag", "/api/v1/lag/history?minutes=5", "/api/v1/runs?limit=5",
         "/api/v1/locks", "/api/v1/alerts", "/api/v1/openapi.json", "/api/v1/docs")  # fmt: skip
ROW = "[777001]"  # a tenants key no other test uses


def _refused(got, words: str) -> None:
    assert got.status_code == 403, got.text
    assert got.json()["detail"].startswith("forbidden: " + words) and "\n" not in got.json()["detail"], got.text


@pytest.mark.parametrize("role", ["viewer", "user", "op", "admin"])
def test_every_role_reads(api_as, role):
    client = api_as(role)
    for path in READS:
        got = client.get(path)
        assert got.status_code == 200, (path, got.text)
    assert client.get("/api/v1/lag/history?minutes=0").status_code == 400  # past the roles, the query checked


def test_no_role_no_token_a_bad_token(api_as):
    from fastapi.testclient import TestClient

    from zonesync_airflow.api import app

    nobody = api_as(None)
    for path in READS:
        _refused(nobody.get(path), "reading zonesync needs read access to Airflow's custom view 'zonesync'")
    _refused(nobody.post("/api/v1/alerts/1/ack"), "reading zonesync needs")
    with TestClient(app) as anonymous:
        assert anonymous.get("/api/v1/zones").status_code == 401
        assert anonymous.get("/api/v1/zones", headers={"Authorization": "Bearer not-a-token"}).status_code == 403


def _open(client, kind: str) -> list[int]:
    return [a["id"] for a in client.get("/api/v1/alerts?limit=1000").json()["alerts"] if a["kind"] == kind]


def test_only_op_and_admin_acknowledge_alerts(api_as, meta):
    from zonesync.meta import alerts

    kind = "roles_test"
    alerts.record(meta, "b", kind, {"why": "the roles test"})
    viewer, user, op, admin = (api_as(r) for r in ("viewer", "user", "op", "admin"))
    (alert_id,) = _open(viewer, kind)
    for client in (viewer, user):
        _refused(client.post(f"/api/v1/alerts/{alert_id}/ack"), "acknowledging an alert needs edit rights on "
                 "Airflow connection 'zonesync_meta' (Airflow's op or admin role)")  # fmt: skip
        _refused(client.post("/api/v1/alerts/x/ack"), "acknowledging an alert")  # before the path is read
    assert _open(viewer, kind) == [alert_id]
    assert op.post(f"/api/v1/alerts/{alert_id}/ack").json() == {"id": alert_id, "acked": True}
    assert _open(viewer, kind) == []
    alerts.record(meta, "c", kind, {"why": "the roles test"})
    (second,) = _open(viewer, kind)
    assert admin.post(f"/api/v1/alerts/{second}/ack").json() == {"id": second, "acked": True}
    assert admin.post(f"/api/v1/alerts/{second + 1000}/ack").status_code == 404  # past the roles: no such alert


def _locked(client, zone: str) -> list:
    zones = {z["zone"]: z["locks"] for z in client.get("/api/v1/locks").json()["zones"]}
    return [(lk["table"], lk["pk"]) for lk in zones[zone]]


def test_only_op_and_admin_lock_and_resolve_rows(api_as):
    viewer, user, op, admin = (api_as(r) for r in ("viewer", "user", "op", "admin"))
    lock = {"table": "tenants", "pk": ROW, "reason": "the roles test"}
    resolve = {"table": "tenants", "pk": ROW, "drop_held": True}
    for client in (viewer, user):
        _refused(client.post("/api/v1/locks/b", json=lock), "locking a row needs edit rights on Airflow connection "
                 "'zonesync_zone_b' (Airflow's op or admin role)")  # fmt: skip
        _refused(client.post("/api/v1/locks/b", json={}), "locking a row")  # before the body is read
        _refused(client.post("/api/v1/locks/q", json=lock), "locking a row needs edit rights on Airflow connection "
                 "'zonesync_zone_q'")  # fmt: skip
    assert ("tenants", [777001]) not in _locked(viewer, "b")

    got = op.post("/api/v1/locks/b", json=lock)
    assert got.status_code == 200 and got.json()["locked"], got.text
    assert ("tenants", [777001]) in _locked(viewer, "b")
    for client in (viewer, user):
        _refused(client.post("/api/v1/locks/b/resolve", json=resolve), "resolving a locked row needs edit rights "
                 "on Airflow connection 'zonesync_zone_b'")  # fmt: skip
    assert ("tenants", [777001]) in _locked(viewer, "b")
    got = op.post("/api/v1/locks/b/resolve", json=resolve)
    assert got.status_code == 200 and got.json()["resolved"], got.text
    assert ("tenants", [777001]) not in _locked(viewer, "b")

    assert admin.post("/api/v1/locks/c", json=lock).status_code == 200
    assert admin.post("/api/v1/locks/c/resolve", json=resolve).status_code == 200
    assert admin.post("/api/v1/locks/c/resolve", json=resolve).status_code == 404  # not locked any more
    assert admin.post("/api/v1/locks/q", json=lock).status_code == 404  # past the roles: no zone q
