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
