"""What every step of a migration shares: its context, its error, the zone connections
and the rules it reads (migrate/steps.py runs the protocol, migrate/moving.py the LEs'
data)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zonesync.meta.db import MetaConfig, MetaError
from zonesync.meta.store import MetaStore
from zonesync.migrate.request import MigrationRequest
from zonesync.migrate.store import RUNNING, Migration, MigrationStore


class MigrationError(MetaError):
    """A step that could not do its part (the DAG's task fails; before flip, rollback runs)."""


@dataclass
class MigrationContext:
    meta: MetaConfig
    run_id: str
    request: MigrationRequest
    zone_conn: Callable  # zone name -> a new DB-API connection to its app database
    actor: str = "airflow"
    ack_timeout_s: float = 10.0
    # waited after the stop's acks before P: the longest transaction a writer outside the
    # guard's commit recheck may still commit (None: the rules' txn_deadline_ms)
    max_txn_ms: int | None = None

    @property
    def store(self) -> MigrationStore:
        return MigrationStore(self.meta)


def with_zone(ctx: MigrationContext, zone: str, fn):
    """fn(a new connection to the zone's app database), the connection closed after."""
    conn = ctx.zone_conn(zone)
    try:
        return fn(conn)
    finally:
        conn.close()


def running(ctx: MigrationContext) -> Migration:
    """The run, or MigrationError when it is no longer running (or being rolled back)."""
    run = ctx.store.require(ctx.run_id)
    if run.status != RUNNING or run.phase == "rolling_back":
        raise MigrationError(f"migration {ctx.run_id} is {run.status} ({run.phase}): {run.detail or ''}".strip())
    return run


def rules_of(ctx: MigrationContext, step: str | None = None):
    """The newest rules, or MigrationError (naming `step`) when none were published."""
    found = MetaStore(ctx.meta).rules_at()
    if found is None:
        raise MigrationError(f"{step + ': ' if step else ''}no rules version: publish rules first")
    return found[1]
