"""Before the flip: are the locating entities' rows the same in the source and the target?

The consistency check's comparison (docs/consistency-check.md), restricted: its zones are
the source and the target, its tables those declaring an entity of the LEs' types, its
rows those whose entity column holds one of the LEs' ids (zonesync.check.sql.
entity_predicate, each zone picks them itself). It runs before the stop-write, while the
LEs are written (Vitess runs VDiff before SwitchTraffic the same way): a difference found
here costs the tenant no stopped second; rows in flight are excused as a scheduled check
excuses them, and the stop-write window's final check (migrate/final_check.py) compares
every row again, exactly, by count and checksum.

Three tasks in the DAG, as the zone switch's verify: `verify_start` (`start`: the check's
run, `<migration run id>.verify`), `verify_check` (the check's Spark job: chunk checksums
pushed down to both zones, rows only of chunks that differ) and `verify` (`outcome`).
Its chunks are planned over the entities' rows (the entity column's index), and each
chunk's checksum reads them with the entity filter, so the cost follows the entity's
size, not the table's.
"""

from __future__ import annotations

from collections.abc import Callable

from zonesync.check import steps as check_steps
from zonesync.check.request import CheckRequest
from zonesync.check.store import SUCCEEDED
from zonesync.meta.db import MetaConfig
from zonesync.migrate.store import Migration


def check_run_id(migration_run_id: str) -> str:
    return f"{migration_run_id}.verify"


def check_context(meta: MetaConfig, run: Migration, zone_conn: Callable) -> check_steps.CheckContext:
    request = CheckRequest(
        zones=(run.source_zone, run.target_zone),
        reason=f"verify of migration {run.run_id}: {run.be_type} {run.be_id} {run.source_zone} -> {run.target_zone}",
        entities=tuple((t, tuple(ids)) for t, ids in sorted(run.entities.items())),
    )
    return check_steps.CheckContext(meta, check_run_id(run.run_id), request, zone_conn, actor="le_migration")


def start(ctx: check_steps.CheckContext) -> dict:
    """The check's run (refusals change nothing) and its start; what its Spark job needs.

    The LEs are still written: as a scheduled check, the cut is a moment ago and a row
    written after it, or not yet applied by the other zone, is excused as in flight (the
    final check, with writes stopped, excuses nothing)."""
    run = check_steps.preflight(ctx)
    check_steps.record_start(ctx)
    return {"check_run_id": run.run_id, "zones": ",".join(run.zones), "tables": ",".join(run.tables)}


def outcome(ctx: check_steps.CheckContext, result: dict) -> dict:
    """The check's result recorded (its report, alerts) and the verdict: {tables, differ
    (rows), mismatched (one line per differing row, the first 1000), detail (when the
    check did not pass)}."""
    run = check_steps.finish(ctx, result)
    differ, mismatched = check_steps.differences(ctx)
    report = {"tables": len(result["tables"]), "differ": differ, "mismatched": mismatched}
    if run.status != SUCCEEDED:
        report["detail"] = run.detail
    return report
