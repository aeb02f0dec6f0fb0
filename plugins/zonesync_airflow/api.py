"""zonesync's HTTP API, served by Airflow's api-server under /zonesync (the plugin's
`fastapi_apps`), behind Airflow's own authentication.

Airflow does not authenticate a plugin's FastAPI app (it is mounted, and a mount inherits
none of the core API's dependencies), so every route here depends on Airflow's
`get_user` (through `airflow_user`): the same JWT as Airflow's REST API (`POST
/auth/token`, or the UI's session cookie); a call without a valid one is refused (401
without a token, 403 with a bad one).

    GET  /zonesync/api/v1/entities/{type}/{id}          where a locating entity is (routing.Router)
    GET  /zonesync/api/v1/tenants/{tenant}              a tenant (biz entity) and its locating entities
    POST /zonesync/api/v1/tenants/{tenant}/migrations   {"to": ZONE, "mode": "plan1", "reason": ...}:
                                                        the le_migration DAG triggered; its run id
    GET  /zonesync/api/v1/tenants/{tenant}/migrations   the tenant's migrations, newest first
    GET  /zonesync/api/v1/migrations/{run_id}           one migration: step, stop-write window, result

A POST is checked against meta first (migrate.steps.movable: 400 naming the field, 404
for an unknown tenant, 409 while it migrates; nothing triggered), then triggers the DAG
through Airflow's own REST API on this api-server with the caller's token, so Airflow's
permissions decide whether this user may run it and the run names the user (a 403 from
it is passed on).

Routes are wiring: the answers come from zonesync.routing and the entity registry, as the
`zonesync entity where | show` commands print them. Errors are one line in `detail`.
"""

from __future__ import annotations

from functools import lru_cache

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

_bearer = HTTPBearer(auto_error=False)


async def airflow_user(request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(_bearer)):
    """Airflow's `get_user` (the bearer token, else the UI's session cookie), imported on
    the first call: every Airflow process loads the plugin, only the api-server serves it
    (the import costs half a second)."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, bearer)


@lru_cache(maxsize=1)
def _router():
    """One Router per api-server process: its answers cached until meta's head moves."""
    from zonesync.meta.db import MetaConfig
    from zonesync.routing import Router

    return Router(MetaConfig.from_env())


def _checked(kind: str, type_: str, id_: str) -> None:
    from zonesync.meta.db import MetaError
    from zonesync.meta.entities import check_ref

    try:
        check_ref(kind, type_, id_, "path")
    except MetaError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


v1 = APIRouter(prefix="/api/v1", dependencies=[Depends(airflow_user)])


@v1.get("/entities/{le_type}/{le_id}")
def entity_where(le_type: str, le_id: str) -> dict:
    """Where a locating entity is: the registry's answer, else the ZSID rules', else 404."""
    from zonesync.routing import Unknown

    _checked("locating entity", le_type, le_id)
    try:
        loc = _router().where(le_type, le_id)
    except Unknown as exc:
        raise HTTPException(status_code=404, detail=f"unknown: {exc}") from None
    return {"entity_type": loc.entity_type, "entity_id": loc.entity_id, "zone": loc.zone, "status": loc.status,
            "stop_write": loc.stop_write, "meta_version": loc.version, "how": loc.how}  # fmt: skip


@v1.get("/tenants/{tenant}")
def tenant_show(tenant: str) -> dict:
    """A tenant (the biz entity `tenant`) and each of its locating entities, or 404."""
    from zonesync.meta.entities import EntityRegistry

    _checked("biz entity", "tenant", tenant)
    found = EntityRegistry(_meta()).biz("tenant", tenant)
    if found is None:
        raise HTTPException(status_code=404, detail=f"unknown: tenant {tenant} is not a registered biz entity")
    biz, les = found
    return {"tenant": biz.be_id, "zone": biz.zone, "status": biz.status, "version": biz.version,
            "locating_entities": [{"type": e.le_type, "id": e.le_id, "zone": e.zone, "status": e.status,
                                   "stop_write": e.stop_write, "version": e.version} for e in les]}  # fmt: skip


class MigrationBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: str = Field(min_length=1, max_length=16)
    mode: str = "plan1"
    reason: str = Field(min_length=1, max_length=500)
    ack_timeout_s: float = Field(10.0, gt=0, le=600)
    sync_timeout_s: float = Field(120.0, ge=1, le=86400)
    max_lag_s: float = Field(5.0, ge=0, le=3600)
    stop_window_utc: str = Field("", pattern=r"^(([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9])?$")
    gate_timeout_s: float = Field(3600.0, ge=1, le=604800)
    plan2_max_rows: int = Field(100_000, ge=0, le=100_000_000)
    keep_source_copy: bool = False


def _meta():
    from zonesync.meta.db import MetaConfig

    return MetaConfig.from_env()


@v1.post("/tenants/{tenant}/migrations", status_code=202)
async def migration_start(tenant: str, body: MigrationBody, request: Request) -> dict:
    """Check the request against meta, then trigger le_migration as the caller."""
    import asyncio

    from zonesync.migrate.request import AlreadyMigrating, MigrationRefused, MigrationRequest, UnknownBizEntity
    from zonesync.migrate.steps import movable

    _checked("biz entity", "tenant", tenant)
    req = MigrationRequest("tenant", tenant, body.to, body.mode, body.reason)
    meta = _meta()
    try:
        await asyncio.to_thread(movable, meta, req)
    except MigrationRefused as exc:
        status = 404 if isinstance(exc, UnknownBizEntity) else 409 if isinstance(exc, AlreadyMigrating) else 400
        raise HTTPException(status_code=status, detail=str(exc)) from None
    conf = {"tenant": tenant, "to_zone": body.to, **body.model_dump(exclude={"to"})}
    run = await _trigger(request, "le_migration", conf)
    return {"run_id": run["dag_run_id"], "dag_id": "le_migration", "state": run.get("state"),
            "status_url": f"/zonesync/api/v1/migrations/{run['dag_run_id']}"}  # fmt: skip


async def _trigger(request: Request, dag_id: str, conf: dict) -> dict:
    """POST /api/v2/dags/{dag_id}/dagRuns on this api-server with the caller's own token (the
    bearer header, else the UI's `_token` cookie): Airflow checks the user may trigger it."""
    import httpx

    token = request.headers.get("authorization", "").removeprefix("Bearer ").strip() or request.cookies.get("_token")
    base = f"{request.url.scheme}://{request.url.netloc}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        resp = await client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf},
                                 headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    if resp.status_code not in (200, 201):
        try:
            detail = resp.json().get("detail")
        except ValueError:
            detail = resp.text
        raise HTTPException(status_code=resp.status_code, detail=f"airflow refused the run: {detail}"[:2000])
    return resp.json()


@v1.get("/tenants/{tenant}/migrations")
def migrations_of(tenant: str, limit: int = 20) -> dict:
    from zonesync.migrate.store import MigrationStore

    _checked("biz entity", "tenant", tenant)
    if not 1 <= limit <= 500:
        raise HTTPException(status_code=400, detail="limit: between 1 and 500")
    runs = MigrationStore(_meta()).history(limit, "tenant", tenant)
    return {"tenant": tenant, "migrations": [m.to_doc() for m in runs]}


@v1.get("/migrations/{run_id}")
def migration_show(run_id: str) -> dict:
    from zonesync.migrate.store import MigrationStore

    run = MigrationStore(_meta()).get(run_id)
    if run is None:
        raise HTTPException(status_code=404, detail=f"unknown: no migration with run id {run_id!r} (refused before "
                            "preflight, or not started yet)")  # fmt: skip
    return run.to_doc()


# no /docs, /redoc or /openapi.json: Airflow would serve them to anyone (they are not routes of `v1`)
app = FastAPI(title="zonesync", description="Locating entities and tenants of a zonesync mesh", docs_url=None,
              redoc_url=None, openapi_url=None)  # fmt: skip
app.include_router(v1)


@app.exception_handler(RequestValidationError)
async def _one_line(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A bad body or query as one line naming the field (FastAPI's default is a list)."""
    first = exc.errors()[0] if exc.errors() else {}
    field = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    return JSONResponse(status_code=400, content={"detail": f"{field}: {first.get('msg', 'invalid')}"})
