"""Locked rows from the console's API: a row locked by hand, listed with the command that
resolves it, resolved with its held change applied; the refusals (locked already, not
locked, an unknown zone, a bad key) in one line. The same code as `zonesync locks`
(console/locks.py)."""

from __future__ import annotations

import pytest

from tests.support.locks import applied_all_of_a, tenant_row
from tests.support.replication import wait_converged

pytestmark = pytest.mark.integration


def test_lock_list_and_resolve_over_http(api, cli_on_cluster, guard_env, zones, meta):
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 3, "name": "v1"})
    wait_converged(zones, ("tenants",))
    body = {"table": "tenants", "pk": "[3]", "reason": "audit #13"}
    got = api.post("/api/v1/locks/b", json=body)
    assert got.status_code == 200 and "tenants [3]: locked in zone b" in got.json()["detail"], got.text
    again = api.post("/api/v1/locks/b", json=body)
    assert again.status_code == 409 and "locked already: manual lock: audit #13" in again.json()["detail"]
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v2"})
    applied_all_of_a(zones, meta)
    assert tenant_row(zones["b"], 3)[1] == "v1"
    listed = {z["zone"]: z["locks"] for z in api.get("/api/v1/locks").json()["zones"]}
    assert [(lk["table"], lk["pk"], lk["held_events"]) for lk in listed["b"]] == [("tenants", [3], 1)]
    assert listed["b"][0]["resolve"] == "zonesync locks resolve --zone b --table tenants --pk '[3]'"
    assert listed["a"] == [] and listed["c"] == []

    done = api.post("/api/v1/locks/b/resolve", json={"table": "tenants", "pk": "[3]"})
    assert done.status_code == 200, done.text
    assert "unlocked; held events released: 1 from a (1 applied, 0 skipped by version)" in done.json()["detail"]
    assert tenant_row(zones["b"], 3) == tenant_row(zones["a"], 3)
    assert api.post("/api/v1/locks/b/resolve", json={"table": "tenants", "pk": "[3]"}).status_code == 404
    unknown = api.post("/api/v1/locks/q/resolve", json={"table": "tenants", "pk": "[3]"})
    assert unknown.status_code == 404 and unknown.json()["detail"] == "unknown: zone 'q'; the zones are a, b, c"
    bad = api.post("/api/v1/locks/b", json={"table": "tenants", "pk": "[3, 4]", "reason": "r"})
    assert bad.status_code == 400 and "\n" not in bad.json()["detail"], bad.text
    assert api.get("/api/v1/locks").json()["zones"][1]["locks"] == []
