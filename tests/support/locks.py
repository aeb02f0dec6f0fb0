"""Helpers of the lock tests: the `zonesync locks` command, a tenant row, catching up."""

from __future__ import annotations

from tests.support.binlog import position
from tests.support.replication import checksum
from zonesync import cli
from zonesync.apply.tools.progress import wait_applied


def locks_cli(capsys, *args: str) -> tuple[int, str]:
    """`zonesync locks ARGS`: (exit code, stdout + stderr)."""
    code = cli.main(["locks", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def tenant_row(zone, tenant_id: int):
    return next((r for r in checksum(zone) if r[0] == tenant_id), None)


def applied_all_of_a(zones, meta, target: str = "b") -> None:
    """The target zone's applier has taken every change zone a wrote so far (held ones included)."""
    source, conn = zones["a"].connect(), zones[target].connect()
    try:
        assert wait_applied(meta, conn, "a", position(source), timeout=15), f"zone {target} did not catch up with a"
    finally:
        source.close()
        conn.close()


def repair_from_a(zones, tenant_id: int):
    """The operator copies zone a's row (name and version) over zone b's, not replicated;
    returns a's row."""
    src = tenant_row(zones["a"], tenant_id)
    conn = zones["b"].connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
            cur.execute(
                "UPDATE tenants SET name = %s, _zs_version = %s WHERE tenant_id = %s", (src[1], src[4], tenant_id)
            )
    finally:
        conn.close()
    return src


def tamper(zones, tenant_id: int, name: str) -> None:
    """Someone edits zone b's copy directly (not replicated)."""
    conn = zones["b"].connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
            cur.execute("UPDATE tenants SET name = %s WHERE tenant_id = %s", (name, tenant_id))
    finally:
        conn.close()
