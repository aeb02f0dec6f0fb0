"""Starting a switch, copy or check from the console's API: a bad body is refused in one
line naming the field, and nothing reaches Airflow. (A good one is triggered through a
real api-server in the dev environment's e2e test.)"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def no_trigger(monkeypatch):
    """Records any trigger instead of calling Airflow: these bodies must never get there."""
    from zonesync_airflow.api import actions

    called = []

    async def record(request, dag_id, conf):
        called.append((dag_id, conf))
        return {"dag_run_id": "manual__x", "state": "queued"}

    monkeypatch.setattr(actions, "trigger", record)
    return called


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [("/api/v1/switches", {"zsids": "9-1", "from_zone": "a", "to_zone": "b", "reason": "r"}, "zsids: "),
     ("/api/v1/switches", {"zsids": "0-9", "from_zone": "a", "to_zone": "x", "reason": "r"},
      "to_zone: unknown zone 'x'; the zones are a, b, c"),
     ("/api/v1/switches", {"zsids": "0-9", "from_zone": "a", "to_zone": "a", "reason": "r"},
      "to_zone: 'a' is also from_zone"),
     ("/api/v1/switches", {"zsids": "0-9", "from_zone": "a", "to_zone": "b"}, "reason: Field required"),
     ("/api/v1/switches", {"zsids": "0-9", "from_zone": "a", "to_zone": "b", "reason": "r", "zone": "c"},
      "zone: Extra inputs are not permitted"),
     ("/api/v1/copies", {"from_zone": "a", "to_zone": "b", "reason": "r", "mode": "mirror"},
      "mode: 'mirror' is not one of"),
     ("/api/v1/copies", {"from_zone": "a", "to_zone": "b", "reason": "r", "tables": ["bad name"]},
      "tables: 'bad name' is not a plain table name"),
     ("/api/v1/copies", {"from_zone": "q", "to_zone": "b", "reason": "r"}, "from_zone: unknown zone 'q'"),
     ("/api/v1/checks", {"reason": "r", "chunk_rows": 5}, "chunk_rows: "),
     ("/api/v1/checks", {"reason": "r", "zones": ["a", "y"]}, "zones: unknown zone 'y'"),
     ("/api/v1/checks", {"reason": "r", "parallel": 0}, "parallel: 0 is out of range")],
)  # fmt: skip
def test_bad_bodies_are_one_line_and_trigger_nothing(api, no_trigger, path, body, words):
    got = api.post(path, json=body)
    assert got.status_code == 400 and got.json()["detail"].startswith(words), got.text
    assert "\n" not in got.json()["detail"]
    assert no_trigger == []


def test_a_good_body_becomes_the_dags_conf(api, no_trigger):
    got = api.post("/api/v1/switches", json={"zsids": "0-9,20", "from_zone": "a", "to_zone": "b", "reason": "r",
                                             "max_txn_ms": 500})  # fmt: skip
    assert got.status_code == 202, got.text
    assert no_trigger == [("zone_switch", {"zsids": "0-9,20", "from_zone": "a", "to_zone": "b", "reason": "r",
                                           "max_txn_ms": 500})]  # fmt: skip
    assert got.json()["airflow_url"] == "/dags/zone_switch/runs/manual__x"
    check = api.post("/api/v1/checks", json={"reason": "nightly", "tables": ["orders"], "rows": False})
    assert check.status_code == 202 and no_trigger[-1] == ("consistency_check", {
        "zones": [], "tables": ["orders"], "chunk_rows": 100_000, "rows": False, "repair": False, "reason": "nightly",
        "parallel": 16})  # fmt: skip
