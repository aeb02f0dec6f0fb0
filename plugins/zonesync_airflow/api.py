"""zonesync's HTTP API, served by Airflow's api-server under /zonesync (the plugin's
`fastapi_apps`), behind Airflow's own authentication.

Airflow does not authenticate a plugin's FastAPI app (it is mounted, and a mount inherits
none of the core API's dependencies), so every route here depends on Airflow's
`get_user` (through `airflow_user`): the same JWT as Airflow's REST API (`POST
/auth/token`, or the UI's session cookie); a call without a valid one is refused (401
without a token, 403 with a bad one).

    GET /zonesync/api/v1/entities/{type}/{id}   where a locating entity is (routing.Router)
    GET /zonesync/api/v1/tenants/{tenant}       a tenant (biz entity) and its locating entities

Routes are wiring: the answers come from zonesync.routing and the entity registry, as the
`zonesync entity where | show` commands print them. Errors are one line in `detail`.
"""

from __future__ import annotations

from functools import lru_cache

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

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
    from zonesync.meta.db import MetaConfig
    from zonesync.meta.entities import EntityRegistry

    _checked("biz entity", "tenant", tenant)
    found = EntityRegistry(MetaConfig.from_env()).biz("tenant", tenant)
    if found is None:
        raise HTTPException(status_code=404, detail=f"unknown: tenant {tenant} is not a registered biz entity")
    biz, les = found
    return {"tenant": biz.be_id, "zone": biz.zone, "status": biz.status, "version": biz.version,
            "locating_entities": [{"type": e.le_type, "id": e.le_id, "zone": e.zone, "status": e.status,
                                   "stop_write": e.stop_write, "version": e.version} for e in les]}  # fmt: skip


# no /docs, /redoc or /openapi.json: Airflow would serve them to anyone (they are not routes of `v1`)
app = FastAPI(title="zonesync", description="Locating entities and tenants of a zonesync mesh", docs_url=None,
              redoc_url=None, openapi_url=None)  # fmt: skip
app.include_router(v1)
