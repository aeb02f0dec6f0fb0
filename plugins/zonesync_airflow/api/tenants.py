"""zonesync's HTTP API: locating entities, tenants and their migrations.

    GET  /zonesync/api/v1/entities/{type}/{id}          where a locating entity is (routing.Router)
    GET  /zonesync/api/v1/tenants/{tenant}              a tenant (biz entity) and its locating entities
    POST /zonesync/api/v1/tenants/{tenant}/migrations   {"to": ZONE, "mode": "plan1", "reason": ...}:
                                                        the le_migration DAG triggered; its run id
    GET  /zonesync/api/v1/tenants/{tenant}/migrations   the tenant's migrations, newest first
    GET  /zonesync/api/v1/migrations/{run_id}           one migration: step, progress and ETA, stop-write window, result

A POST is checked against meta first (migrate.steps.movable: 400 naming the field, 404
for an unknown tenant, 409 while it migrates; nothing triggered), then triggers the DAG
through Airflow's own REST API on this api-server with the caller's token, so Airflow's
permissions decide whether this user may run it and the run names the user (a 403 from
it is passed on).

Routes are wiring: the answers come from zonesync.routing and the entity registry, as the
`zonesync entity where | show` commands print them. Errors are one line in `detail`.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from zonesync_airflow.api.auth import meta, router, trigger


def _checked(kind: str, type_: str, id_: str) -> None:
    from zonesync.meta.db import MetaError
    from zonesync.meta.entities import check_ref

    try:
        check_ref(kind, type_, id_, "path")
    except MetaError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


routes = APIRouter()


@routes.get("/entities/{le_type}/{le_id}")
def entity_where(le_type: str, le_id: str) -> dict:
    """Where a locating entity is: the registry's answer, else the ZSID rules', else 404."""
    from zonesync.routing import Unknown

    _checked("locating entity", le_type, le_id)
    try:
        loc = router().where(le_type, le_id)
    except Unknown as exc:
        raise HTTPException(status_code=404, detail=f"unknown: {exc}") from None
    return {"entity_type": loc.entity_type, "entity_id": loc.entity_id, "zone": loc.zone, "status": loc.status,
            "stop_write": loc.stop_write, "meta_version": loc.version, "how": loc.how}  # fmt: skip


@routes.get("/tenants/{tenant}")
def tenant_show(tenant: str) -> dict:
    """A tenant (the biz entity `tenant`) and each of its locating entities, or 404."""
    from zonesync.meta.entities import EntityRegistry

    _checked("biz entity", "tenant", tenant)
    found = EntityRegistry(meta()).biz("tenant", tenant)
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
    les: list[str] = Field(default_factory=list, max_length=1000)  # TYPE:ID; empty: every LE of the tenant
    ack_timeout_s: float = Field(10.0, gt=0, le=600)
    sync_timeout_s: float = Field(120.0, ge=1, le=86400)
    max_lag_s: float = Field(5.0, ge=0, le=3600)
    stop_window_utc: str = Field("", pattern=r"^(([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9])?$")
    gate_timeout_s: float = Field(3600.0, ge=1, le=604800)
    plan2_max_rows: int = Field(100_000, ge=0, le=100_000_000)
    keep_source_copy: bool = False
    stock_chunk_rows: int = Field(50_000, ge=100, le=10_000_000)


@routes.post("/tenants/{tenant}/migrations", status_code=202)
async def migration_start(tenant: str, body: MigrationBody, request: Request) -> dict:
    """Check the request against meta, then trigger le_migration as the caller."""
    import asyncio

    from zonesync.migrate.request import (
        AlreadyMigrating,
        MigrationRefused,
        MigrationRequest,
        UnknownBizEntity,
        parse_les,
    )
    from zonesync.migrate.steps import movable

    _checked("biz entity", "tenant", tenant)
    try:
        req = MigrationRequest("tenant", tenant, body.to, body.mode, body.reason, parse_les(body.les))
        await asyncio.to_thread(movable, meta(), req)
    except MigrationRefused as exc:
        status = 404 if isinstance(exc, UnknownBizEntity) else 409 if isinstance(exc, AlreadyMigrating) else 400
        raise HTTPException(status_code=status, detail=str(exc)) from None
    conf = {"tenant": tenant, "to_zone": body.to, **body.model_dump(exclude={"to"})}
    run = await trigger(request, "le_migration", conf)
    return {"run_id": run["dag_run_id"], "dag_id": "le_migration", "state": run.get("state"),
            "status_url": f"/zonesync/api/v1/migrations/{run['dag_run_id']}"}  # fmt: skip


@routes.get("/tenants/{tenant}/migrations")
def migrations_of(tenant: str, limit: int = 20) -> dict:
    from zonesync.migrate.store import MigrationStore

    _checked("biz entity", "tenant", tenant)
    if not 1 <= limit <= 500:
        raise HTTPException(status_code=400, detail="limit: between 1 and 500")
    runs = MigrationStore(meta()).history(limit, "tenant", tenant)
    return {"tenant": tenant, "migrations": [m.to_doc() for m in runs]}


@routes.get("/migrations/{run_id}")
def migration_show(run_id: str) -> dict:
    from zonesync.migrate.store import MigrationStore

    run = MigrationStore(meta()).get(run_id)
    if run is None:
        raise HTTPException(status_code=404, detail=f"unknown: no migration with run id {run_id!r} (refused before "
                            "preflight, or not started yet)")  # fmt: skip
    doc = run.to_doc()
    if run.status == "running":  # its stage, the stage's chunks and the run's ETA
        from zonesync.console.migration_progress import progress
        from zonesync_airflow.api.auth import zone_conn

        doc["progress"] = progress(meta(), run, zone_conn)
    return doc
