"""Open alerts from the console's API with what resolves each (console/alert_help.py): a
row locked by a real mismatch comes back with the command the locks table shows for it,
and that command, run as printed, resolves the lock; a recorded alert whose cure repeats
per zone names the mesh's zones; `zonesync alerts` prints the same."""

from __future__ import annotations

import shlex

import pytest

from tests.support.locks import applied_all_of_a, tamper, tenant_row
from tests.support.replication import wait_converged

pytestmark = pytest.mark.integration


def test_a_row_locked_alert_comes_back_with_the_command_that_resolves_it(api, cli_on_cluster, guard_env, zones, meta,
                                                                         capsys):  # fmt: skip
    from zonesync import cli

    meta.run("UPDATE alerts SET acked = 1")
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 3, "name": "v1"})
    wait_converged(zones, ("tenants",))
    tamper(zones, 3, "tampered")
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v2"})
    applied_all_of_a(zones, meta, "b")

    listed = api.get("/api/v1/alerts").json()["alerts"]
    assert [(a["zone"], a["kind"]) for a in listed] == [("b", "row_locked")], listed
    found = listed[0]
    assert found["detail"]["pk"] == "[3]" and found["detail"]["source"] == "a", found
    command = "zonesync locks resolve --zone b --table tenants --pk '[3]'"
    assert found["resolve"] == command
    assert "tenants [3] is locked in zone b, its changes from zone a held" in found["hint"], found["hint"]
    assert found["doc"] == "docs/replication.md#apply-the-applier"
    locked = {z["zone"]: z["locks"] for z in api.get("/api/v1/locks").json()["zones"]}["b"]
    assert [lk["resolve"] for lk in locked] == [command], "the same command as the locks table's"

    assert cli.main(["alerts"]) == 1
    printed = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(printed) if line.startswith(f"#{found['id']} "))
    assert printed[at + 1] == f"    resolve: {command}", printed
    assert printed[at + 2] == f"    {found['hint']} ({found['doc']})", printed

    assert cli.main(shlex.split(command)[1:]) == 0, "the command, run as printed, resolves the lock"
    capsys.readouterr()
    assert {z["zone"]: z["locks"] for z in api.get("/api/v1/locks").json()["zones"]}["b"] == []
    assert tenant_row(zones["b"], 3) == tenant_row(zones["a"], 3)
    assert api.post(f"/api/v1/alerts/{found['id']}/ack").status_code == 200
    assert api.get("/api/v1/alerts").json()["alerts"] == []


def test_a_cure_per_zone_names_the_mesh_zones_and_an_unknown_kind_says_to_acknowledge(api, meta):
    from zonesync.meta import alerts

    meta.run("UPDATE alerts SET acked = 1")
    skip = {"from": "binlog.000002:4", "to": "binlog.000005:4", "lsn": 3, "reason": "r", "by": "test", "action": "."}
    alerts.record(meta, "a", "binlog_skipped", skip)
    alerts.record(meta, "c", "new_kind_no_one_wrote_advice_for", {"x": 1})
    skipped, unknown = api.get("/api/v1/alerts").json()["alerts"]
    why = f"'alert {skipped['id']}: binlog_skipped in zone a'"
    assert skipped["resolve"] == (f"zonesync copy --from a --to b --mode repair --reason {why} && "
                                  f"zonesync copy --from a --to c --mode repair --reason {why}")  # fmt: skip
    assert skipped["doc"] == "docs/copy.md#online-full-copy"
    assert unknown["resolve"] is None and unknown["hint"].endswith(f"`zonesync alerts --ack {unknown['id']}`")
    assert unknown["doc"] == "docs/console.md#alerts-and-what-resolves-them"
    meta.run("UPDATE alerts SET acked = 1")
