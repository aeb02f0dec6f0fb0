"""zonesync's HTTP API, served by Airflow's api-server under /zonesync (the plugin's
`fastapi_apps`), behind Airflow's own authentication (auth.py), and the console page.

    /zonesync/api/v1/...    tenants.py (entities, tenants, migrations), reads.py (zones, rules,
                            lag, runs, checks, locks, alerts), actions.py (switches, copies,
                            checks started; alerts acknowledged); openapi.json (the
                            API's OpenAPI document, for signed-in users)
    /zonesync/console/      the console page (page.py), also in Airflow's navigation

Errors are one line in `detail`: a bad body or query names its field (400).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from zonesync_airflow.api import actions, page, reads, tenants
from zonesync_airflow.api.auth import airflow_user

# no /docs, /redoc or /openapi.json at the app's root: Airflow would serve them to anyone
app = FastAPI(title="zonesync", version="1", description="zonesync's mesh, runs and tenants, under Airflow's auth",
              docs_url=None, redoc_url=None, openapi_url=None)  # fmt: skip
v1 = APIRouter(prefix="/api/v1", dependencies=[Depends(airflow_user)])
for part in (tenants, reads, actions):
    v1.include_router(part.routes)


@v1.get("/openapi.json", include_in_schema=False)
def openapi() -> dict:
    """The API's OpenAPI document, for signed-in users."""
    return app.openapi()


app.include_router(v1)
app.include_router(page.routes)


@app.exception_handler(RequestValidationError)
async def _one_line(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A bad body or query as one line naming the field (FastAPI's default is a list)."""
    first = exc.errors()[0] if exc.errors() else {}
    field = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")) or "body"
    return JSONResponse(status_code=400, content={"detail": f"{field}: {first.get('msg', 'invalid')}"})
