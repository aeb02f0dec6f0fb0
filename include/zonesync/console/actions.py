"""A switch, copy or check asked for (by the HTTP API or the `zonesync` command): the
request checked as far as it can be without running anything, then the DAG's conf.

Each `*_conf(body, zones)` takes the DAG's own param names and returns the conf to
trigger it with, or raises Refused("field: why, and the fix") naming the first field
that is wrong; nothing is triggered then. Airflow checks the conf against the DAG's
Params again when it is triggered, and the DAG's preflight checks it against the mesh
(guards healthy, leases free, lag), as for a run started from Airflow's form.
"""

from __future__ import annotations

from zonesync.check.request import CheckRefused, CheckRequest
from zonesync.check.request import check_shape as check_check_shape
from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync.copy.request import check_shape as copy_check_shape
from zonesync.switch.plan import parse_zsids


class Refused(ValueError):
    """'field: why': the request's field that cannot be used."""


def _known(field: str, zone, zones: list[str]) -> None:
    if zones and zone not in zones:
        raise Refused(f"{field}: unknown zone {zone!r}; the zones are {', '.join(zones)}")


def _required(body: dict, names: tuple[str, ...], example: str) -> None:
    missing = [n for n in names if body.get(n) in (None, "")]
    if missing:
        raise Refused(f"{missing[0]}: required (example: {example})")


def switch_conf(body: dict, zones: list[str]) -> dict:
    _required(body, ("zsids", "from_zone", "to_zone", "reason"),
              "zsids '0-99', from_zone 'a', to_zone 'b', reason 'move EU tenants'")  # fmt: skip
    try:
        parse_zsids(body["zsids"])
    except ValueError as exc:
        raise Refused(f"zsids: {exc}") from None
    _known("from_zone", body["from_zone"], zones)
    _known("to_zone", body["to_zone"], zones)
    if body["from_zone"] == body["to_zone"]:
        raise Refused(f"to_zone: {body['to_zone']!r} is also from_zone: a switch moves ZSIDs to a different zone")
    keys = ("zsids", "from_zone", "to_zone", "reason", "ack_timeout_s", "max_txn_ms", "lag_threshold_s",
            "sync_timeout_s", "actor")  # fmt: skip
    return {k: body[k] for k in keys if body.get(k) is not None}


_COPY_FIELDS = {"from": "from_zone", "to": "to_zone"}


def copy_conf(body: dict, zones: list[str]) -> dict:
    _required(body, ("from_zone", "to_zone", "reason"), "from_zone 'a', to_zone 'b', reason 'rebuild b'")
    tables = tuple(body.get("tables") or ())
    req = CopyRequest(body["from_zone"], body["to_zone"], tables, body.get("mode", "rebuild"), body["reason"],
                      body.get("chunk_rows", 50_000))  # fmt: skip
    try:
        copy_check_shape(req)
    except CopyRefused as exc:
        field, _, why = str(exc).partition(": ")
        raise Refused(f"{_COPY_FIELDS.get(field, field)}: {why}") from None
    _known("from_zone", req.source_zone, zones)
    _known("to_zone", req.target_zone, zones)
    conf = {"from_zone": req.source_zone, "to_zone": req.target_zone, "tables": list(tables), "mode": req.mode,
            "reason": req.reason, "chunk_rows": req.chunk_rows}  # fmt: skip
    return {**conf, **{k: body[k] for k in ("parallel", "max_lag_s", "catch_up_timeout_s") if body.get(k) is not None}}


def check_conf(body: dict, zones: list[str]) -> dict:
    req = CheckRequest(tuple(body.get("zones") or ()), tuple(body.get("tables") or ()),
                       body.get("chunk_rows", 100_000), body.get("rows", True), body.get("repair", False),
                       body.get("reason") or "asked from the console")  # fmt: skip
    try:
        check_check_shape(req)
    except CheckRefused as exc:
        raise Refused(str(exc)) from None
    for zone in req.zones:
        _known("zones", zone, zones)
    parallel = body.get("parallel", 16)
    if not isinstance(parallel, int) or not 1 <= parallel <= 256:
        raise Refused(f"parallel: {parallel!r} is out of range; use 1..256")
    conf = {"zones": list(req.zones), "tables": list(req.tables), "chunk_rows": req.chunk_rows, "rows": req.rows,
            "repair": req.repair, "reason": req.reason, "parallel": parallel}  # fmt: skip
    return {**conf, **({"max_lag_s": body["max_lag_s"]} if body.get("max_lag_s") is not None else {})}
