"""Manual row locks (S000-66): `zonesync locks add` locks a row in a target zone the way a
mismatch does; its changes are held while other rows flow, `locks list` shows it, and
`locks resolve` releases the held changes in order (or skips them by version)."""

from __future__ import annotations

import pytest

from tests.support.locks import applied_all_of_a, locks_cli, repair_from_a, tenant_row
from tests.support.replication import ZONES, wait_converged

pytestmark = pytest.mark.integration


def test_a_manual_lock_holds_the_rows_changes_until_resolve_releases_them_in_order(
    cli_on_cluster, guard_env, zones, meta, capsys
):
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 3, "name": "v1"})
        tx.insert("tenants", {"tenant_id": 5, "name": "w1"})
    wait_converged(zones, ("tenants",))

    code, out = locks_cli(capsys, "add", "--zone", "b", "--table", "tenants", "--pk", "[3]", "--reason", "audit #12")
    assert code == 0 and "tenants [3]: locked in zone b" in out, out
    code, out = locks_cli(capsys, "add", "--zone", "b", "--table", "tenants", "--pk", "[3]", "--reason", "again")
    assert code == 1 and "locked already: manual lock: audit #12" in out, out

    # two changes of the locked row (the second's old row is the first's new one: order
    # matters), one change of another row, in separate transactions
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v2"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 5}, {"name": "w2"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 3}, {"name": "v3"})
    applied_all_of_a(zones, meta)
    assert tenant_row(zones["b"], 3)[1] == "v1", "a locked row is not changed"
    assert tenant_row(zones["b"], 5) == tenant_row(zones["a"], 5), "other rows keep flowing"
    code, out = locks_cli(capsys, "list", "--zone", "b")
    assert code == 1 and "tenants pk=[3] held=2 " in out and "manual lock: audit #12" in out, out

    code, out = locks_cli(capsys, "resolve", "--zone", "b", "--table", "tenants", "--pk", "[3]")
    assert code == 0 and "unlocked; held events released: 2 from a (2 applied, 0 skipped by version)" in out, out
    assert tenant_row(zones["b"], 3) == tenant_row(zones["a"], 3), "the held changes landed, in order, with a's version"
    code, out = locks_cli(capsys, "list", "--zone", "b")
    assert code == 0 and "no locked rows in zone b" in out, out
    with ga.transaction() as tx:  # and later changes flow as before
        tx.update("tenants", {"tenant_id": 3}, {"name": "v4"})
    sums = wait_converged(zones, ("tenants",))
    assert {r[1] for r in sums["tenants"]["b"]} == {"v4", "w2"}


def test_held_changes_already_in_the_target_are_skipped_by_version(cli_on_cluster, guard_env, zones, meta, capsys):
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "x1"})
    wait_converged(zones, ("tenants",))
    code, out = locks_cli(
        capsys, "add", "--zone", "b", "--table", "tenants", "--pk", '{"tenant_id": 7}', "--reason", "r"
    )
    assert code == 0, out
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 7}, {"name": "x2"})
    applied_all_of_a(zones, meta)
    assert tenant_row(zones["b"], 7)[1] == "x1"
    # the operator repairs b's row from a (its version too), then resolves
    src = repair_from_a(zones, 7)
    code, out = locks_cli(capsys, "resolve", "--zone", "b", "--table", "tenants", "--pk", "[7]")
    assert code == 0 and "released: 1 from a (0 applied, 1 skipped by version)" in out, out
    assert tenant_row(zones["b"], 7) == src
    assert {z: tenant_row(zones[z], 7) for z in ZONES} == {z: src for z in ZONES}


@pytest.mark.parametrize(
    "args, names",
    [
        (["--table", "tenants", "--pk", "[3", "--reason", "r"], ["--pk", "not JSON", "'[42]'"]),
        (["--table", "tenants", "--pk", "[3, 4]", "--reason", "r"], ["--pk", "[tenant_id]", "1 value"]),
        (["--table", "tenants", "--pk", '{"id": 3}', "--reason", "r"], ["--pk", "[tenant_id]"]),
        (["--table", "tenants", "--pk", "[null]", "--reason", "r"], ["--pk", "numbers or strings"]),
        (["--table", "tenants", "--pk", "3", "--reason", "r"], ["--pk", "JSON list"]),
        (["--table", "no_such_table", "--pk", "[3]", "--reason", "r"], ["--table no_such_table", "no such table"]),
        (["--table", "x; DROP TABLE y", "--pk", "[3]", "--reason", "r"], ["--table", "not a table name"]),
        (["--table", "tenants", "--pk", "[3]"], ["--reason"]),
        (["--pk", "[3]", "--reason", "r"], ["--table"]),
    ],
)
def test_locks_add_refuses_an_unusable_table_or_key(zones, capsys, args, names):
    conn = zones["b"].connect()
    conn.autocommit(True)  # each count sees what is committed now
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
            before = cur.fetchone()[0]
            code, out = locks_cli(capsys, "add", "--zone", "b", *args)
            assert code == 2 and all(n in out for n in names), out
            cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
            assert cur.fetchone()[0] == before, "nothing locked"
    finally:
        conn.close()
