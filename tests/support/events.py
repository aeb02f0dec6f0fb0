"""ChangeEvents built by hand for tests: every field has a plain default, so a test
names only what it is about."""

from __future__ import annotations

from zonesync.events import ChangeEvent


def change_event(*, lsn: int, op: str, table: str, pk: dict, version: int, **fields) -> ChangeEvent:
    defaults = dict(
        prev_lsn=lsn - 10,
        source_zone="a",
        origin_zone=1,
        old=None,
        new=None,
        txn_id="x",
        row_index=0,
        row_count=1,
        commit_ts=0,
        partition=0,
    )
    return ChangeEvent(lsn=lsn, op=op, table=table, pk=pk, version=version, **{**defaults, **fields})


# -- tenants rows and events for the write-plan tests -----------------------------------
def sql_lit(value) -> str:
    """A SQL literal as the applier's connection would quote it (ints and plain strings)."""
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def tenant_row(tenant: int, version: int, name: str = "x", origin: int = 1) -> dict:
    return {"tenant_id": tenant, "name": name, "_zs_origin": origin, "_zs_version": version}


def tenant_event(lsn: int, op: str, tenant: int, version: int, old=None, new=None) -> ChangeEvent:
    return change_event(lsn=lsn, op=op, table="tenants", pk={"tenant_id": tenant}, version=version, old=old, new=new)
