"""zonesync's HTTP API, served by Airflow's api-server under /zonesync (the plugin's
`fastapi_apps`), behind Airflow's own authentication (auth.py), and the console page.

    /zonesync/api/v1/...    tenants.py (entities, tenants, migrations), reads.py (zones, rules,
                            lag, runs, checks, locks, alerts), datadocs.py (a check's Great
                            Expectations Data Docs), actions.py (switches, copies,
                            checks started; locks and alerts settled); openapi.json and
                            docs (the API's OpenAPI document and a reference page, for
                            users with read access: auth.py maps Airflow's roles)
    /zonesync/console/      the console page (page.py), also in Airflow's navigation

Errors are one line in `detail`: a bad body or query names its field (400).
"""

from __future__ import annotations

import html

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse

from zonesync_airflow.api import actions, datadocs, page, reads, tenants
from zonesync_airflow.api.auth import may_read

# no /docs, /redoc or /openapi.json at the app's root: Airflow would serve them to anyone
app = FastAPI(title="zonesync", version="1", description="zonesync's mesh, runs and tenants, under Airflow's auth",
              docs_url=None, redoc_url=None, openapi_url=None)  # fmt: skip
# every route: a signed-in user with read access (auth.py); operator actions add theirs (actions.py)
v1 = APIRouter(prefix="/api/v1", dependencies=[Depends(may_read)])
for part in (tenants, reads, datadocs, actions):
    v1.include_router(part.routes)


@v1.get("/openapi.json", include_in_schema=False)
def openapi() -> dict:
    """The API's OpenAPI document, for signed-in users."""
    return app.openapi()


@v1.get("/docs", include_in_schema=False, response_class=HTMLResponse)
def api_page() -> str:
    """The API's reference as one page (from its OpenAPI document; no assets fetched from
    elsewhere, as Swagger UI would)."""
    return reference_page(app.openapi())


def reference_page(doc: dict) -> str:
    """Every route: method, path, what it does, its query and body fields (pure)."""
    rows = []
    schemas = doc.get("components", {}).get("schemas", {})
    for path, methods in sorted(doc.get("paths", {}).items()):
        for method, op in methods.items():
            params = [p["name"] + ("" if p.get("required") else "?") for p in op.get("parameters", [])]
            ref = (op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
                   .get("$ref", ""))  # fmt: skip
            body = list(schemas.get(ref.rsplit("/", 1)[-1], {}).get("properties", {})) if ref else []
            what = (op.get("description") or op.get("summary") or "").strip().split("\n\n")[0]
            rows.append(f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape('/zonesync' + path)}</code>"
                        f"</td><td>{html.escape(what)}</td><td>{html.escape(', '.join(params))}</td>"
                        f"<td>{html.escape(', '.join(body))}</td></tr>")  # fmt: skip
    return (
        "<!doctype html><meta charset='utf-8'><title>zonesync API</title><style>body{font:14px system-ui;"
        "margin:1.5rem}td,th{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}"
        "</style><h1>zonesync API v1</h1><p>Behind Airflow's authentication (its token or session). The OpenAPI "
        "document: <a href='openapi.json'>openapi.json</a>. See docs/console.md.</p><table><tr><th>method</th>"
        "<th>path</th><th>what</th><th>query / path</th><th>body</th></tr>" + "".join(rows) + "</table>"
    )


app.include_router(v1)
app.include_router(page.routes)


@app.exception_handler(RequestValidationError)
async def _one_line(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A bad body or query as one line naming the field (FastAPI's default is a list)."""
    first = exc.errors()[0] if exc.errors() else {}
    field = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")) or "body"
    return JSONResponse(status_code=400, content={"detail": f"{field}: {first.get('msg', 'invalid')}"})
