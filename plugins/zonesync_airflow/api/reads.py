"""zonesync's HTTP API: what the console reads (console.*, as `zonesync runs | health |
lag | alerts | locks` print it).

    GET /zonesync/api/v1/zones                  each zone: health, guards, replicator, appliers, open alerts
    GET /zonesync/api/v1/rules                  the current rules version's ZSID ranges, and those moving
    GET /zonesync/api/v1/lag                    lag per zone pair and capture lag, as last reported
    GET /zonesync/api/v1/lag/history?minutes=60 per zone pair, 10 s samples (the page's chart)
    GET /zonesync/api/v1/runs?kind=&limit=&before=
                                                switches, copies, checks, migrations, backfills, schema
                                                changes: newest first, paged, the running ones with
                                                progress and ETA
    GET /zonesync/api/v1/checks/{run_id}        a check's report (JSON; ?format=html for the page)
    GET /zonesync/api/v1/locks                  each zone's locked rows
    GET /zonesync/api/v1/alerts?limit=          open alerts, oldest first, each with the command that resolves it
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import HTMLResponse

from zonesync_airflow.api.auth import bad, meta, zone_conn, zones

routes = APIRouter()


@routes.get("/zones")
async def zones_health() -> dict:
    from zonesync.console import mesh

    return {"zones": await asyncio.to_thread(mesh.zones, meta())}


@routes.get("/rules")
async def rules_map() -> dict:
    from zonesync.console import mesh

    return await asyncio.to_thread(mesh.zone_map, meta())


@routes.get("/lag")
async def lag_now() -> dict:
    from zonesync.console import lag

    return await asyncio.to_thread(lag.now, meta())


@routes.get("/lag/history")
async def lag_history(minutes: int = Query(60, ge=1, le=1440)) -> dict:
    from zonesync.console import lag

    return await asyncio.to_thread(lag.history, meta(), minutes)


@routes.get("/runs")
async def runs_page(kind: str | None = None, limit: int = 50, before: str | None = None) -> dict:
    from zonesync.console import runs

    try:
        return await asyncio.to_thread(runs.recent, meta(), kind, limit, before, zone_conn)
    except runs.BadQuery as exc:
        raise bad(exc) from None


@routes.get("/checks/{run_id}", response_model=None)
async def check_report(run_id: str, format: str = Query("json", pattern="^(json|html)$")) -> dict | HTMLResponse:
    from zonesync.check import report
    from zonesync.check.store import CheckStore

    if await asyncio.to_thread(CheckStore(meta()).get, run_id) is None:
        raise HTTPException(status_code=404, detail=f"unknown: no check with run id {run_id!r}")
    doc = await asyncio.to_thread(report.build, meta(), run_id, 1000)
    return HTMLResponse(report.page(doc)) if format == "html" else doc


def _locks() -> list[dict]:
    """Each zone's locked rows; a zone out of reach is listed with its error."""
    from zonesync.console import locks

    out = []
    for zone in zones():
        try:
            out.append({"zone": zone, "error": None, "locks": locks.listed(zone, zone_conn)})
        except Exception as exc:  # noqa: BLE001 - one zone down must not hide the others' locks
            out.append({"zone": zone, "error": str(exc).splitlines()[0][:300], "locks": []})
    return out


@routes.get("/locks")
async def locks() -> dict:
    return {"zones": await asyncio.to_thread(_locks)}


@routes.get("/alerts")
async def open_alerts(limit: int = Query(100, ge=1, le=1000)) -> dict:
    from zonesync.console import alert_help
    from zonesync.meta import alerts

    def listed() -> list[dict]:  # each with the command that resolves it, a hint and its docs section
        return alert_help.annotate(alerts.open_alerts(meta(), limit), zones())

    return {"alerts": await asyncio.to_thread(listed)}
