"""The console page: /zonesync/console/ (index.html, console.js, console.css from the
plugin's console/ folder), shown inside Airflow's UI by the plugin's external view.

The files hold no data (the script reads the API with the session's cookie), but they
are served to signed-in users only, as everything under /zonesync: a browser without
Airflow's session is sent to Airflow's login, and back here after it.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, RedirectResponse

from zonesync_airflow.api.auth import airflow_user

FILES = Path(__file__).resolve().parents[1] / "console"
TYPES = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}

routes = APIRouter()


@routes.get("/console", include_in_schema=False)
async def console_slash(request: Request):
    """/console -> /console/: the page's files are named relative to it."""
    return RedirectResponse(str(request.url.path) + "/")


@routes.get("/console/", include_in_schema=False)
@routes.get("/console/{name}", include_in_schema=False)
async def console_file(request: Request, name: str = "index.html"):
    if name not in TYPES:
        raise HTTPException(status_code=404, detail=f"unknown: no console file {name!r}")
    try:
        await airflow_user(request, None)
    except HTTPException:
        return RedirectResponse(f"/auth/login?next={quote('/zonesync/console/', safe='')}")
    return FileResponse(FILES / name, media_type=TYPES[name], headers={"Cache-Control": "no-cache"})
