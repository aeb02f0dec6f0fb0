"""zonesync's HTTP API: a check's Great Expectations Data Docs (zonesync.check.data_docs).

    GET /zonesync/api/v1/checks/{run_id}/datadocs         to the run's validation page
    GET /zonesync/api/v1/checks/{run_id}/datadocs/{path}  a file of the check's Data Docs site

404 with one line when the check is unknown, has no Data Docs, or they are not on the
api-server's host (the line names where they are).
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

from zonesync_airflow.api.auth import meta

routes = APIRouter()


def _root(run_id: str):
    from zonesync.check import data_docs
    from zonesync.check.store import CheckStore

    check = CheckStore(meta()).get(run_id)
    if check is None:
        raise HTTPException(status_code=404, detail=f"unknown: no check with run id {run_id!r}")
    try:
        return data_docs.site_root((check.summary.get("_expectations") or {}).get("data_docs"))
    except data_docs.DataDocsMissing as exc:
        raise HTTPException(status_code=404, detail=f"check {run_id}: {exc}") from None


@routes.get("/checks/{run_id}/datadocs", response_class=RedirectResponse)
async def run_docs(run_id: str) -> RedirectResponse:
    from zonesync.check import data_docs

    root = await asyncio.to_thread(_root, run_id)
    page = await asyncio.to_thread(data_docs.run_page, root, run_id)
    return RedirectResponse(f"datadocs/{quote(page)}", status_code=307)


@routes.get("/checks/{run_id}/datadocs/{path:path}", response_class=FileResponse)
async def docs_file(run_id: str, path: str) -> FileResponse:
    from zonesync.check import data_docs

    root = await asyncio.to_thread(_root, run_id)
    try:
        return FileResponse(await asyncio.to_thread(data_docs.file_in_site, root, path))
    except data_docs.DataDocsMissing as exc:
        raise HTTPException(status_code=404, detail=f"check {run_id}: {exc}") from None
