"""Data locks (S000-64) resolved by `zonesync locks resolve` (S003-31): a row changed
behind the applier's back in zone b is locked, not overwritten, while other rows keep
flowing; after the operator's repair, `locks resolve` releases it and later changes of
the row apply again."""

from __future__ import annotations

import pytest

from tests.support.locks import applied_all_of_a, locks_cli, repair_from_a, tamper, tenant_row
from tests.support.replication import ZONES, alerts, wait_converged

pytestmark = pytest.mark.integration


def _lock_rows(zones) -> list[tuple]:
    conn = zones["b"].connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name, pk, reason, held_events FROM zonesync.row_locks ORDER BY pk")
            return list(cur.fetchall())
    finally:
        conn.close()


def _lock_row_3(ga, zones, meta) -> None:
    """Tenant 3 locked in zone b by a mismatch (b's copy tampered, then a changes it twice);
    tenant 5 changed in between and tenant 6 inserted: they must keep flowing."""
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 3, "name": "v1"})
        tx.insert("tenants", {"tenant_id": 5, "name": "w1"})
    wait_converged(zones, ("tenants",))
    tamper(zones, 3, "tampered")
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v2"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 5}, {"name": "w2"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v3"})
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 6, "name": "u1"})
    applied_all_of_a(zones, meta, "b")
    applied_all_of_a(zones, meta, "c")


def test_a_locked_row_stays_while_others_flow_and_resolve_after_repair_releases_it(
    cli_on_cluster, guard_env, zones, meta, capsys
):
    ga = guard_env("a")
    _lock_row_3(ga, zones, meta)

    assert tenant_row(zones["c"], 3)[1] == "v3", "zone c (no mismatch) takes both changes"
    assert tenant_row(zones["b"], 3)[1] == "tampered", "a mismatched row must not be overwritten"
    assert tenant_row(zones["b"], 5) == tenant_row(zones["a"], 5), "another row changed meanwhile keeps flowing"
    assert tenant_row(zones["b"], 6) == tenant_row(zones["a"], 6), "a row inserted meanwhile keeps flowing"
    locks = _lock_rows(zones)
    assert [(t, pk) for t, pk, _, _ in locks] == [("tenants", "[3]")], locks
    reason, held = locks[0][2], locks[0][3]
    assert "differs from the event's old row in name" in reason and held >= 1, locks
    assert [a["pk"] for a in alerts(meta, "b", "row_locked")] == ["[3]"], alerts(meta, "b", "row_locked")
    code, out = locks_cli(capsys, "list", "--zone", "b")
    assert code == 1 and "tenants pk=[3] held=" in out, out

    # more changes while locked: the locked row's are held, the others' land
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 5}, {"name": "w3"})
        tx.update("tenants", {"tenant_id": 3}, {"name": "v4"})
    applied_all_of_a(zones, meta, "b")
    assert tenant_row(zones["b"], 5)[1] == "w3"
    assert tenant_row(zones["b"], 3)[1] == "tampered"
    assert _lock_rows(zones)[0][3] > held, "the later change of the locked row is held (counted)"

    # the operator repairs b's row from the owner (name and version), then resolves
    repair_from_a(zones, 3)
    code, out = locks_cli(capsys, "resolve", "--zone", "b", "--table", "tenants", "--pk", "[3]")
    assert code == 0 and "tenants [3]: unlocked" in out, out
    assert _lock_rows(zones) == []
    code, out = locks_cli(capsys, "list", "--zone", "b")
    assert code == 0 and "no locked rows in zone b" in out, out
    code, out = locks_cli(capsys, "resolve", "--zone", "b", "--table", "tenants", "--pk", "[3]")
    assert code == 1 and "was not locked" in out, out

    # later changes of the row apply again, everywhere
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v5"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v6"})
    sums = wait_converged(zones, ("tenants",))
    assert {r[0]: r[1] for r in sums["tenants"]["b"]} == {3: "v6", 5: "w3", 6: "u1"}
    assert _lock_rows(zones) == [], "no new lock"
    assert len(alerts(meta, "b", "row_locked")) == 1, "no new lock alert"
    assert {z: tenant_row(zones[z], 3) for z in ZONES} == {z: tenant_row(zones["a"], 3) for z in ZONES}


def test_resolve_without_a_repair_takes_the_owners_currenttenant_row(cli_on_cluster, guard_env, zones, meta, capsys):
    ga = guard_env("a")
    _lock_row_3(ga, zones, meta)
    assert tenant_row(zones["b"], 3)[1] == "tampered" and _lock_rows(zones), "locked, not overwritten"
    code, out = locks_cli(capsys, "resolve", "--zone", "b", "--table", "tenants", "--pk", "[3]")
    assert code == 0 and "tenants [3]: unlocked" in out, out
    assert _lock_rows(zones) == []
    assert tenant_row(zones["b"], 3) == tenant_row(zones["a"], 3), "resolve writes the owner's row, with its version"
