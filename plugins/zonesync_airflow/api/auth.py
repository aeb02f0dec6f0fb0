"""What every route of zonesync's HTTP API shares: Airflow's authentication and roles,
meta, the zones, and triggering a DAG as the caller.

Airflow does not authenticate a plugin's FastAPI app (it is mounted, and a mount inherits
none of the core API's dependencies), so every route depends on Airflow's `get_user`
(through `airflow_user`): the same JWT as Airflow's REST API (`POST /auth/token`, or the
UI's `_token` session cookie); a call without a valid one is refused (401 without a
token, 403 with a bad one).

Roles are the configured auth manager's, asked as Airflow's core API asks it
(security.py's `requires_access_*`), by the dependencies below; a refusal is 403 with one
line naming the permission missing:

- `may_read` (every route, the API's router): read access to the plugin's custom view
  `zonesync` (`is_authorized_custom_view`, the auth manager's check for a plugin's own
  views). The simple auth manager grants it to every role from viewer up; FAB and
  Keycloak to whom their admin grants resource `zonesync`.
- `may_ack`, `may_lock`, `may_resolve` (operator actions): they write to production
  directly, outside any DAG run (meta's alerts; a zone's locked rows, a resolve with
  `drop_held` discarding the held changes), with zonesync's own database accounts. They
  need edit rights on the Airflow connection they write through (`zonesync_meta`,
  `zonesync_zone_<zone>`): whoever may change those credentials may already do anything
  they allow, so the action grants nothing more, and a viewer, or a user who may only
  run DAGs, may not. Under the simple auth manager (and FAB) that is the op and admin
  roles.
- Starting a run (switches, copies, checks, migrations) needs `may_read` here; Airflow's
  own REST API then checks the caller may trigger that DAG (`trigger`).

Airflow's multi-team mode is not consulted (zonesync's zones belong to no team).
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


READ_VIEW = "zonesync"


def _auth_manager():
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def _refuse(what: str, needs: str):
    return HTTPException(status_code=403, detail=f"forbidden: {what} needs {needs}")


def may_read(user=Depends(airflow_user)) -> None:
    """Read access to the custom view `zonesync` (sync: an auth manager may ask a server)."""
    if not _auth_manager().is_authorized_custom_view(method="GET", resource_name=READ_VIEW, user=user):
        raise _refuse("reading zonesync", f"read access to Airflow's custom view {READ_VIEW!r}")


def operator_action(what: str, conn_id: str):
    """A dependency: the caller may edit Airflow connection `conn_id` (formatted with the
    route's path parameters, as `zonesync_zone_{zone}`), else 403 naming it."""

    def check(request: Request, user=Depends(airflow_user)) -> None:
        from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

        conn = conn_id.format(**request.path_params)
        if not _auth_manager().is_authorized_connection(method="PUT", details=ConnectionDetails(conn_id=conn),
                                                        user=user):  # fmt: skip
            raise _refuse(what, f"edit rights on Airflow connection {conn!r} (Airflow's op or admin role)")

    return check


may_ack = operator_action("acknowledging an alert", "zonesync_meta")
may_lock = operator_action("locking a row", "zonesync_zone_{zone}")
may_resolve = operator_action("resolving a locked row", "zonesync_zone_{zone}")


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
