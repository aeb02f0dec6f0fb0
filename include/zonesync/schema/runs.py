"""The schema_change DAG's runs in meta (`schema_runs`, 0022), and the drain they leave.

A run's row is written by its preflight once the statement passed (one per Airflow run
id: a retried preflight finds its own), moved by apply (`applying`), verify (`verified`)
and resume (`draining`, with each zone's parked events of the table counted at that
moment), and ended by report (`succeeded` in phase `draining` or `done`, or `failed`).

The drain goes on after the DAG ends: every zone's appliers apply the events parked while
the zones differed, then delete the hold (apply/batch/table_holds.py). Its progress is
read from the zones, never stored: per zone the events still parked against the count at
resume, the rate since resume and an ETA; `drained` once no zone holds the table.
"""

from __future__ import annotations

import json

from zonesync.apply.batch import table_holds
from zonesync.meta.db import MetaConfig

RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"


def start(meta: MetaConfig, run_id: str, table: str, statement: str, zones, reason: str, actor: str) -> None:
    meta.run(
        "INSERT IGNORE INTO schema_runs (run_id, table_name, statement, zones_json, reason, actor) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (run_id, table, statement, json.dumps(list(zones)), reason[:500], actor[:128]),
    )


def phase(meta: MetaConfig, run_id: str, name: str) -> None:
    meta.run("UPDATE schema_runs SET phase = %s WHERE run_id = %s AND status = %s", (name, run_id, RUNNING))


def draining(meta: MetaConfig, run_id: str, parked: dict[str, int]) -> None:
    """Resumed: the parked events per zone at this moment (the first count is kept)."""
    meta.run(
        "UPDATE schema_runs SET phase = 'draining', drain_json = COALESCE(drain_json, %s), "
        "resumed_at = COALESCE(resumed_at, NOW(6)) WHERE run_id = %s",
        (json.dumps(parked), run_id),
    )


def finish(meta: MetaConfig, run_id: str, status: str, detail: str) -> None:
    """End the run once; a run that resumed holds stays in phase `draining`."""
    meta.run(
        "UPDATE schema_runs SET status = %s, detail = %s, finished_at = NOW(6), "
        "phase = IF(%s = 'succeeded' AND phase <> 'draining', 'done', phase) WHERE run_id = %s AND status = %s",
        (status, detail[:4000], status, run_id, RUNNING),
    )


def get(meta: MetaConfig, run_id: str) -> dict | None:
    rows, _ = meta.run(
        "SELECT run_id, table_name, zones_json, status, phase, drain_json, resumed_at FROM schema_runs "
        "WHERE run_id = %s",
        (run_id,),
    )
    if not rows:
        return None
    run_id, table, zones, status, phase_now, drain, resumed_at = rows[0]
    return {"run_id": run_id, "table": table, "zones": json.loads(zones), "status": status, "phase": phase_now,
            "drain": json.loads(drain) if drain else None, "resumed_at": resumed_at}  # fmt: skip


def parked_now(zone_conn, zones, table: str) -> dict[str, int]:
    """zone -> events of the table parked there now (0: no hold left)."""
    out = {}
    for zone in zones:
        conn = zone_conn(zone)
        try:
            hold = table_holds.holds(conn).get(table)
        finally:
            conn.close()
        out[zone] = 0 if hold is None else hold[3]
    return out


def drain_progress(at_resume: dict[str, int], now: dict[str, int], seconds: float) -> dict:
    """The drain over the run's zones (pure): events drained of those parked at resume,
    the rate since resume, the ETA of the slowest zone; `drained` once none is left.
    Events parked after resume (the hold parks new ones until it is gone) count as left."""
    total = sum(at_resume.values())
    left = sum(now.values())
    done = max(0, total - left)
    rate = done / seconds if seconds > 0 and done else None
    etas = [n / (max(0, at_resume.get(z, 0) - n) / seconds) for z, n in now.items()
            if n and seconds > 0 and at_resume.get(z, 0) > n]  # fmt: skip
    eta = max(etas) if etas and len(etas) == sum(1 for n in now.values() if n) else None
    return {"unit": "events", "done": done, "total": max(total, done + left), "rows": done, "rate_rows_s": rate,
            "eta_s": 0.0 if not left else eta, "drained": not left, "zones": now}  # fmt: skip
