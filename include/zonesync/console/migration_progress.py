"""A running migration's progress over the whole run: which of its stages it is in, the
chunks of the stage that has chunks (the stock copy's in the target zone, the verify
check's in meta), and an ETA for the rest of the run, as the console's runs, `GET
/zonesync/api/v1/migrations/{run_id}` and `zonesync migrate status` show it.

The stages, in the DAG's order (dags/le_migration.py):

    plan1: preflight, stock, verify, gate, cutover, release
    plan2: preflight, stock, cutover, release   (stop_first before the stock copy: the
                                                 whole copy inside the stop-write window)

The stage is read off what the run recorded (its phase and moments in meta, the stock
copy's chunks, the verify check's row): a step writes these before acting, so the stage
shown is never ahead of the work. The ETA adds the current chunked stage's own ETA (its
chunks left at its measured rate, copy.chunks.summarize) to how long the stages after it
took in the last HISTORY migrations that succeeded (the median of each): the verify check
(its check's run), the cutover (stop-write published to lifted) and the release (lifted
to finished). A stage with no history, or a chunked stage with no rate yet, leaves the ETA
unknown (None) and `eta_note` says what is missing; the gate's wait (for the target to
keep up, or for the stop-write window to open) is not counted, and the note says so.
"""

from __future__ import annotations

import datetime as dt
import statistics

from zonesync.check.report import as_done
from zonesync.check.store import CheckStore
from zonesync.copy import chunks
from zonesync.meta.db import MetaConfig
from zonesync.migrate.steps import stock_run_id
from zonesync.migrate.store import Migration
from zonesync.migrate.verify import check_run_id

PLAN1 = ("preflight", "stock", "verify", "gate", "cutover", "release")
PLAN2 = ("preflight", "stock", "cutover", "release")
CUTOVER_PHASES = ("synced", "verified", "flipping")
HISTORY = 20


def stages(mode: str) -> tuple[str, ...]:
    return PLAN2 if mode == "plan2" else PLAN1


def stage(run: Migration, stock: dict | None, verify_started: bool) -> str:
    """The stage a running migration is in (pure). `stock`: chunks.combined()'s figures of the
    stock copy's chunks (None before the copy planned any: not started, or nothing
    resident to copy); `verify_started`: the verify check's run exists."""
    if run.phase == "rolling_back":
        return "rollback"
    if run.phase == "lifted":
        return "release"
    if run.phase in CUTOVER_PHASES:
        return "cutover"
    stock_done = stock is not None and stock["done"] >= stock["total"]
    if run.mode == "plan2":
        if run.phase == "preflight":
            return "preflight"
        # stopped first: the copy, then the cutover (stop_write's moment is the stop_first's)
        return "cutover" if stock_done or run.position is not None else "stock"
    if run.phase == "stopped":
        return "cutover"
    if run.phase == "checked":
        return "gate"
    if verify_started:
        return "verify"
    return "stock"


def _median_s(spans: list[float]) -> float | None:
    return statistics.median(spans) if spans else None


def typical(meta: MetaConfig, mode: str) -> dict[str, float | None]:
    """How long each later stage took in the last HISTORY succeeded migrations of `mode`
    (medians, seconds; None without history): verify, cutover, release."""
    rows, _ = meta.run(
        "SELECT run_id, COALESCE(stop_published_at, stopped_at), lifted_at, finished_at FROM migrations "
        "FORCE INDEX (idx_migrations_created) WHERE status = 'succeeded' AND mode = %s "
        "ORDER BY created_at DESC, run_id DESC LIMIT %s",
        (mode, HISTORY),
    )
    cutover = [(lift - stop).total_seconds() for _, stop, lift, _ in rows if stop and lift]
    release = [(end - lift).total_seconds() for _, _, lift, end in rows if lift and end]
    verify: list[float] = []
    if rows and mode != "plan2":
        marks = ", ".join(["%s"] * len(rows))
        checks, _ = meta.run(
            f"SELECT created_at, finished_at FROM checks WHERE run_id IN ({marks}) AND finished_at IS NOT NULL",
            tuple(check_run_id(r[0]) for r in rows),
        )
        verify = [(end - began).total_seconds() for began, end in checks]
    return {"verify": _median_s(verify), "cutover": _median_s(cutover), "release": _median_s(release)}


def estimate(run: Migration, now: dt.datetime, current: str, chunked: dict | None,
             usual: dict[str, float | None]) -> tuple[float | None, str]:  # fmt: skip
    """The ETA of the whole run and what it counts (pure): the current stage's remainder
    (its chunks' ETA, or its usual length less the time it has run) and the usual length
    of each stage after it."""
    order = stages(run.mode)
    if current not in order:
        return None, f"no ETA while {current}"
    later = [s for s in order[order.index(current) + 1 :] if s != "gate"]  # the gate's wait: not counted
    missing, total = [], 0.0
    if current in ("stock", "verify"):
        if chunked is None or chunked.get("eta_s") is None:
            missing.append(f"{current} rate")
        else:
            total += chunked["eta_s"]
    elif current in usual:
        since = {"cutover": run.stop_published_at or run.stopped_at, "release": run.lifted_at}.get(current)
        if usual[current] is None:
            missing.append(f"past {current}s")
        else:
            total += max(0.0, usual[current] - ((now - since).total_seconds() if since else 0.0))
    for name in later:
        if name == "stock":  # plan2 before its copy: no rate until it runs
            missing.append("stock rate")
        elif usual[name] is None:
            missing.append(f"past {name}s")
        else:
            total += usual[name]
    if missing:
        return None, f"ETA unknown: no {', '.join(missing)} yet"
    basis = f"median of the last {HISTORY} succeeded {run.mode} migrations for the later stages"
    waits = " (not counting the gate's wait)" if run.mode != "plan2" and "gate" in order[order.index(current) :] else ""
    return total, basis + waits


def progress(meta: MetaConfig, run: Migration, zone_conn=None, now: dt.datetime | None = None) -> dict:
    """A running migration's progress: {"unit": "chunks", "stage", "stage_no", "stages", and
    the current stage's chunks (done, total, rows, rate_rows_s, chunk_eta_s; None when it
    has none), "eta_s" (the whole run's, or None) and "eta_note"}."""

    stock = None
    if zone_conn is not None:
        try:
            conn = zone_conn(run.target_zone)
        except Exception:  # noqa: BLE001 - the target out of reach: the stock copy's chunks unknown
            conn = None
        if conn is not None:
            try:
                stock = chunks.combined(chunks.summarize((), chunks.read(conn, stock_run_id(run.run_id))))
            finally:
                conn.close()
    store = CheckStore(meta)
    check = store.get(check_run_id(run.run_id)) if run.mode != "plan2" else None
    current = stage(run, stock, check is not None)
    chunked = stock if current == "stock" else None
    if current == "verify" and check is not None:
        done = [c for t in check.tables for c in as_done(store.chunks(check.run_id, t))]
        chunked = chunks.combined(chunks.summarize((), done))
    order = stages(run.mode)
    if now is None:
        rows, _ = meta.run("SELECT NOW(6)")
        now = rows[0][0]
    eta, note = estimate(run, now, current, chunked, typical(meta, run.mode))
    figures = chunked or {}
    return {"unit": "chunks", "stage": current, "stage_no": order.index(current) + 1 if current in order else None,
            "stages": list(order), "done": figures.get("done"), "total": figures.get("total"),
            "rows": figures.get("rows"), "rate_rows_s": figures.get("rate_rows_s"),
            "chunk_eta_s": figures.get("eta_s"), "eta_s": eta, "eta_note": note}  # fmt: skip


def text(p: dict) -> str:
    """The progress on one line, as `zonesync migrate status` prints it (pure)."""
    where = f"stage {p['stage_no']}/{len(p['stages'])} {p['stage']}" if p["stage_no"] else p["stage"]
    if p["total"]:
        where += f": {p['done']}/{p['total']} chunks, {p['rows']:,} rows"
        if p["rate_rows_s"]:
            where += f", {p['rate_rows_s']:,.0f} rows/s"
    eta = f"about {p['eta_s']:,.0f} s left ({p['eta_note']})" if p["eta_s"] is not None else p["eta_note"]
    return f"{where}; {eta}"
