"""After activate: are the moved ZSIDs' rows the same in from_zone and to_zone?

The comparison is the consistency check's (docs/consistency-check.md), restricted: its
zones are from_zone and to_zone, its rows those of the moved ZSIDs (each zone picks
them itself: zonesync.check.sql.zsid_predicate), and what to_zone wrote since activation
is left out: rows whose `_zs_origin` is to_zone are not in either zone's chunk
checksums, and a key whose row carries that origin in either zone is not reported (it
is on its way back to from_zone). A key to_zone deleted since is not reported either
(its tombstone is newer than the check's cut, the activation). Everything else must match exactly: it
is what from_zone owned and wrote up to P, which wait_sync proved applied. Before rows
are compared, the check waits until each zone applied the other up to its start.

So verify is three tasks in the DAG: `verify_start` (this module's `start`: the check's
run, named `<switch run id>.verify`, its cut and positions), `verify_check` (the
check's Spark job: chunk checksums pushed down to the two zones, rows only of chunks
that differ), and `verify` (`outcome`: the check's result recorded, its differing rows
turned into the switch's verdict). Memory stays flat in rows at any table size; the
check's report (`zonesync check report <switch run id>.verify`) shows every row.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC

from zonesync.check import steps as check_steps
from zonesync.check.request import CheckRequest
from zonesync.check.store import SUCCEEDED
from zonesync.meta.db import MetaConfig
from zonesync.rules.model import RuleSet
from zonesync.switch.plan import SwitchRequest


def check_run_id(switch_run_id: str) -> str:
    return f"{switch_run_id}.verify"


def check_context(meta: MetaConfig, switch_run_id: str, req: SwitchRequest, rules: RuleSet, zone_ids: dict,
                  zone_conn: Callable) -> check_steps.CheckContext:  # fmt: skip
    request = CheckRequest(
        zones=(req.from_zone, req.to_zone),
        tables=tuple(sorted(rules.replicated_tables())),  # resident rows never move by ZSID
        reason=f"verify of zone switch {switch_run_id}: ZSIDs {req.zsids_text} {req.from_zone} -> {req.to_zone}",
        zsids=tuple(req.zsids),
        exclude_origin=int(zone_ids[req.to_zone]),
    )
    return check_steps.CheckContext(meta, check_run_id(switch_run_id), request, zone_conn, actor="zone_switch")


def start(ctx: check_steps.CheckContext, activated_at, recorded_version: int) -> dict:
    """The check's run (refusals change nothing) and its start; what its Spark job needs.

    The cut is the activation (by the meta store's clock), not a moment before now: what
    from_zone wrote up to P, its last writes before the switch included, is compared;
    what to_zone wrote since is left out by its origin whatever its version, and a key
    to_zone deleted since (its tombstone newer than the cut) is not reported. The rules
    whose owners are right are those recorded before the switch: from_zone's rows are the
    truth the moved ZSIDs' rows in to_zone must match."""
    run = check_steps.preflight(ctx)
    cut = int(activated_at.replace(tzinfo=UTC).timestamp() * 1_000_000)
    check_steps.record_start(ctx, cut, recorded_version)
    return {"check_run_id": run.run_id, "zones": ",".join(run.zones), "tables": ",".join(run.tables)}


def outcome(ctx: check_steps.CheckContext, result: dict, from_zone: str) -> dict:
    """The check's result recorded (zonesync.check.steps.finish: its report, alerts), and
    the switch's verdict: {tables, rows (from_zone's rows of the moved ZSIDs compared),
    differ (rows), mismatched (one line per differing row, the first 1000), detail (when
    the check did not pass)}."""
    run = check_steps.finish(ctx, result)
    differ, mismatched = check_steps.differences(ctx)  # all of them; `mismatched` lists the first 1000
    rows = sum(int((t.get("rows") or {}).get(from_zone) or 0) for t in result["tables"].values())
    report = {"tables": len(result["tables"]), "rows": rows, "differ": differ, "mismatched": mismatched}
    if run.status != SUCCEEDED:
        report["detail"] = run.detail
    return report
