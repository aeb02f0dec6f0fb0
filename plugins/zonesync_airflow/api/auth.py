"""What every route of zonesync's HTTP API shares: Airflow's authentication, meta, the
zones, and triggering a DAG as the caller.

Airflow does not authenticate a plugin's FastAPI app (it is mounted, and a mount inherits
none of the core API's dependencies), so every route depends on Airflow's `get_user`
(through `airflow_user`): the same JWT as Airflow's REST API (`POST /auth/token`, or the
UI's `_token` session cookie); a call without a valid one is refused (401 without a
token, 403 with a bad one).
"""

from __future__ import annotations

from functools import lru_cache

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False)


async def airflow_user(request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(_bearer)):
    """Airflow's `get_user` (the bearer token, else the UI's session cookie), imported on
    the first call: every Airflow process loads the plugin, only the api-server serves it
    (the import costs half a second)."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, bearer)


def meta():
    from zonesync.meta.db import MetaConfig

    return MetaConfig.from_env()


@lru_cache(maxsize=1)
def router():
    """One Router per api-server process: its answers cached until meta's head moves."""
    from zonesync.routing import Router

    return Router(meta())


def zones() -> list[str]:
    """The mesh's zones, in id order (meta's zones table)."""
    from zonesync.meta.store import MetaStore

    return [name for name, _ in sorted(MetaStore(meta()).zones().items(), key=lambda kv: kv[1])]


def zone_conn(zone: str):
    """A zone's database, as the `zonesync` command reaches it (console/access.py)."""
    from zonesync.console.access import zone_conn as connect

    return connect(zone)


def bad(exc: Exception, status: int = 400) -> HTTPException:
    return HTTPException(status_code=status, detail=str(exc))


async def trigger(request: Request, dag_id: str, conf: dict) -> dict:
    """POST /api/v2/dags/{dag_id}/dagRuns on this api-server with the caller's own token (the
    bearer header, else the UI's `_token` cookie): Airflow checks the user may trigger it,
    and checks the conf against the DAG's Params (a 400 from it is passed on)."""
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
