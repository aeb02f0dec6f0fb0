"""zonesync's HTTP API: what the console starts and settles.

    POST /zonesync/api/v1/switches         {"zsids", "from_zone", "to_zone", "reason", ...}: zone_switch
    POST /zonesync/api/v1/copies           {"from_zone", "to_zone", "reason", "mode", "tables", ...}: full_copy
    POST /zonesync/api/v1/checks           {"zones", "tables", "reason", "rows", "repair", ...}: consistency_check
    POST /zonesync/api/v1/alerts/{id}/ack  an alert acknowledged
    POST /zonesync/api/v1/locks/{zone}          {"table", "pk", "reason"}: a row locked by hand
    POST /zonesync/api/v1/locks/{zone}/resolve  {"table", "pk", "drop_held"}: a locked row resolved

A body names the DAG's own params. It is checked as the `zonesync switch | copy | check`
commands check their flags (console.actions: 400 naming the field, nothing triggered),
then the DAG is triggered through Airflow's REST API as the caller (Airflow checks the
user's permission and the conf against the DAG's Params); the run id comes back (202)
with where to follow it.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from zonesync_airflow.api.auth import bad, may_ack, may_lock, may_resolve, meta, trigger, zone_conn, zones

routes = APIRouter()
ZONE = Field(min_length=1, max_length=16)
REASON = Field(min_length=1, max_length=500)


class SwitchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    zsids: str = Field(min_length=1, max_length=2000)
    from_zone: str = ZONE
    to_zone: str = ZONE
    reason: str = REASON
    ack_timeout_s: float | None = Field(None, gt=0, le=600)
    max_txn_ms: int | None = Field(None, ge=0, le=600_000)
    lag_threshold_s: float | None = Field(None, ge=0, le=3600)
    sync_timeout_s: float | None = Field(None, ge=1, le=86400)


class CopyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    from_zone: str = ZONE
    to_zone: str = ZONE
    reason: str = REASON
    mode: str = "rebuild"
    tables: list[str] = Field(default_factory=list, max_length=1000)
    chunk_rows: int = 50_000
    parallel: int | None = Field(None, ge=1, le=256)
    max_lag_s: float | None = Field(None, ge=0, le=3600)
    catch_up_timeout_s: float | None = Field(None, ge=1, le=86400)


class CheckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = REASON
    zones: list[str] = Field(default_factory=list, max_length=16)
    tables: list[str] = Field(default_factory=list, max_length=1000)
    chunk_rows: int = 100_000
    rows: bool = True
    repair: bool = False
    parallel: int = 16
    max_lag_s: float | None = Field(None, ge=0, le=3600)


async def _start(request: Request, dag_id: str, build, body: BaseModel, path: str) -> dict:
    from zonesync.console.actions import Refused

    try:
        conf = build(body.model_dump(), await asyncio.to_thread(zones))
    except Refused as exc:
        raise bad(exc) from None
    run = await trigger(request, dag_id, conf)
    run_id = run["dag_run_id"]
    return {"run_id": run_id, "dag_id": dag_id, "state": run.get("state"), "conf": conf,
            "status_url": f"/zonesync/api/v1/{path}",
            "airflow_url": f"/dags/{dag_id}/runs/{quote(run_id, safe='')}"}  # fmt: skip


@routes.post("/switches", status_code=202)
async def switch_start(body: SwitchBody, request: Request) -> dict:
    from zonesync.console.actions import switch_conf

    return await _start(request, "zone_switch", switch_conf, body, "runs?kind=switch")


@routes.post("/copies", status_code=202)
async def copy_start(body: CopyBody, request: Request) -> dict:
    from zonesync.console.actions import copy_conf

    return await _start(request, "full_copy", copy_conf, body, "runs?kind=copy")


@routes.post("/checks", status_code=202)
async def check_start(body: CheckBody, request: Request) -> dict:
    from zonesync.console.actions import check_conf

    return await _start(request, "consistency_check", check_conf, body, "runs?kind=check")


@routes.post("/alerts/{alert_id}/ack", dependencies=[Depends(may_ack)])
async def alert_ack(alert_id: int) -> dict:
    from zonesync.meta import alerts

    if not await asyncio.to_thread(alerts.ack, meta(), alert_id):
        raise HTTPException(status_code=404, detail=f"unknown: no alert {alert_id}")
    return {"id": alert_id, "acked": True}


class LockBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    table: str = Field(min_length=1, max_length=64)
    pk: str = Field(min_length=1, max_length=2000, description='key values as JSON, e.g. "[42]"')
    reason: str = REASON


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    table: str = Field(min_length=1, max_length=64)
    pk: str = Field(min_length=1, max_length=2000, description='key values as JSON, e.g. "[42]"')
    drop_held: bool = False


async def _known_zone(zone: str) -> list[str]:
    names = await asyncio.to_thread(zones)
    if zone not in names:
        raise HTTPException(status_code=404, detail=f"unknown: zone {zone!r}; the zones are {', '.join(names)}")
    return names


@routes.post("/locks/{zone}", dependencies=[Depends(may_lock)])
async def lock_add(zone: str, body: LockBody) -> dict:
    """As `zonesync locks add`: the row's changes are held from now on (409 if locked already)."""
    from zonesync.console import locks
    from zonesync.console.access import zone_writer

    names = await _known_zone(zone)
    try:
        done = await asyncio.to_thread(locks.add, zone, body.table, body.pk, body.reason, names, zone_writer)
    except locks.LockError as exc:
        raise bad(exc) from None
    if not done["added"]:
        raise HTTPException(status_code=409, detail=done["line"])
    return {"zone": zone, "locked": True, "detail": done["line"]}


@routes.post("/locks/{zone}/resolve", dependencies=[Depends(may_resolve)])
async def lock_resolve(zone: str, body: ResolveBody) -> dict:
    """As `zonesync locks resolve` (404 if the row was not locked; 409 if its held changes
    are gone from the broker, or a released change locked it again)."""
    from zonesync.console import locks
    from zonesync.console.access import zone_writer

    await _known_zone(zone)
    try:
        done = await asyncio.to_thread(locks.resolve, meta(), zone, body.table, body.pk, body.drop_held, zone_writer,
                                       zone_conn)  # fmt: skip
    except locks.LockError as exc:
        raise bad(exc) from None
    except locks.HeldEventsLost as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from None
    if not done["found"]:
        raise HTTPException(status_code=404, detail=done["line"])
    if done["relocked"]:
        raise HTTPException(status_code=409, detail=f"{done['line']}; locked again: {done['relocked'][0]}")
    return {"zone": zone, "resolved": True, "detail": done["line"]}
