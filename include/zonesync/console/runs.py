"""Switches, copies, checks, migrations, tag backfills and schema changes as one list,
newest first, with what the page and `zonesync runs` show of each: its state, what it
moves or compares, its write-blocked (switch) or stop-write (migration) window, and, while
it runs, its progress with rate and ETA.

One query reads a page of runs: each kind's newest `limit` before the cursor (by its
created_at index), merged and cut to `limit`; the next page starts before the last run
shown. Progress is read only for the running runs of the page, where their chunks are:
a check's in meta, a backfill's in meta (written by its job after each wave), a copy's
in the target zone; a schema change's drain of its parked events in each zone (also once
its run ended: schema/runs.py); a migration's over its whole run
(console/migration_progress.py: its stage, the stage's chunks, the run's ETA).
"""

from __future__ import annotations

import datetime as dt
import json
from urllib.parse import quote

from zonesync.check.report import as_done
from zonesync.check.store import CheckStore
from zonesync.copy import chunks
from zonesync.meta.db import MetaConfig

DAGS = {"switch": "zone_switch", "copy": "full_copy", "check": "consistency_check", "migration": "le_migration",
        "backfill": "tag_backfill", "schema": "schema_change"}  # fmt: skip
MAX_LIMIT = 500


def _select(kind: str, table: str, src: str, dst: str, facts: str, w0: str = "NULL", w1: str = "NULL",
            who: str = "actor, reason", dag_run: str = "run_id") -> str:  # fmt: skip
    """One kind's runs in the union's columns (named: a derived table needs unique names)."""
    return (f"SELECT '{kind}' AS kind, run_id, status, phase, created_at, finished_at, {src} AS src, {dst} AS dst, "
            f"{facts} AS facts, {w0} AS w0, {w1} AS w1, detail, {who}, {dag_run} AS dag_run FROM {table} "
            f"FORCE INDEX (idx_{table}_created)")  # fmt: skip


_SELECT = {
    "switch": _select("switch", "switches", "from_zone", "to_zone", "JSON_OBJECT('zsids', zsids)", "blocked_at",
                      "activated_at"),
    "copy": _select("copy", "copies", "source_zone", "target_zone",
                    "JSON_OBJECT('mode', mode, 'tables', JSON_COMPACT(tables_json))"),
    "check": _select("check", "checks", "NULL", "NULL",
                     "JSON_OBJECT('zones', JSON_COMPACT(zones_json), 'tables', JSON_COMPACT(tables_json), "
                     "'docs', JSON_VALUE(summary_json, '$._expectations.data_docs'))"),
    "migration": _select("migration", "migrations", "source_zone", "target_zone",
                         "JSON_OBJECT('entity', CONCAT(be_type, ' ', be_id), 'mode', mode)",
                         "COALESCE(stop_published_at, stopped_at)", "lifted_at"),
    "backfill": _select("backfill", "backfills", "zone", "NULL", "JSON_OBJECT('tables', JSON_COMPACT(tables_json))",
                        who="'tag_backfill' AS actor, 'tag the rows older than their rule' AS reason",
                        dag_run="COALESCE(airflow_run_id, run_id)"),
    "schema": _select("schema", "schema_runs", "NULL", "NULL",
                      "JSON_OBJECT('statement', LEFT(statement, 300), 'zones', JSON_COMPACT(zones_json))"),
}  # fmt: skip


class BadQuery(ValueError):
    """A field of a runs query that cannot be used: 'field: why'."""


def _kinds(kind: str | None) -> list[str]:
    if kind is None or kind == "":
        return list(_SELECT)
    if kind not in _SELECT:
        raise BadQuery(f"kind: {kind!r} is not one of {', '.join(_SELECT)}")
    return [kind]


def _cursor(before: str | None) -> tuple[dt.datetime, str]:
    """The page's cursor: the last run shown as "created_at|run_id" (runs started in the
    same microsecond are told apart by their run id); a bare time is every run before it."""
    if not before:
        return dt.datetime(9999, 1, 1), ""
    at, _, run_id = before.partition("|")
    try:
        return dt.datetime.fromisoformat(at), run_id
    except ValueError:
        raise BadQuery(f"before: {before!r} is not a time like 2026-11-27T15:04:05.123456 "
                       "(the next_before of the page before)") from None  # fmt: skip


def recent(meta: MetaConfig, kind: str | None = None, limit: int = 50, before: str | None = None,
           zone_conn=None) -> dict:  # fmt: skip
    """A page of runs, newest first: {"runs": [...], "next_before": the cursor of the last
    one, or None at the end}. `zone_conn(zone)` opens a zone (for running copies' and
    migrations' progress); without it their progress is left out."""
    if not 1 <= limit <= MAX_LIMIT:
        raise BadQuery(f"limit: {limit} is out of range; use 1..{MAX_LIMIT}")
    kinds, (at, run_id) = _kinds(kind), _cursor(before)
    # each kind's newest `limit` before the cursor, by its (created_at, run_id) index
    # (a range of created_at read by the index, forced: near the newest runs the optimizer
    # would rather read the whole table and sort it, to keep 50 rows)
    where = "WHERE created_at <= %s AND (created_at < %s OR run_id < %s)" if run_id else "WHERE created_at < %s"
    args = (at, at, run_id) if run_id else (at,)
    sql = " UNION ALL ".join(f"({_SELECT[k]} {where} ORDER BY created_at DESC, run_id DESC LIMIT {limit})"
                             for k in kinds)  # fmt: skip
    page = f"SELECT * FROM ({sql}) runs ORDER BY created_at DESC, run_id DESC LIMIT {limit}"
    rows, _ = meta.run(page, args * len(kinds))
    runs = [doc(row) for row in rows]
    for run in runs:
        if run["status"] == "running" or run["phase"] == "draining":  # a schema change's drain outlives its run
            run["progress"] = progress(meta, run, zone_conn)
    more = len(rows) == limit
    return {"runs": runs, "next_before": f"{runs[-1]['created_at']}|{runs[-1]['run_id']}" if more else None}


def _iso(moment) -> str | None:
    return None if moment is None else moment.isoformat()


def doc(row: tuple) -> dict:
    """One run of the union as the API returns it (pure)."""
    kind, run_id, status, phase, created, finished, src, dst, facts, w0, w1, detail, actor, reason, dag_run = row
    window = (w1 - w0).total_seconds() * 1000 if w0 is not None and w1 is not None else None
    facts = json.loads(facts)
    check = f"/zonesync/api/v1/checks/{quote(run_id, safe='')}" if kind == "check" else None
    return {"kind": kind, "run_id": run_id, "status": status, "phase": phase,
            "what": _what(kind, facts, src, dst),
            "source_zone": src, "target_zone": dst, "window_ms": window, "detail": detail, "actor": actor,
            "reason": reason, "created_at": _iso(created), "finished_at": _iso(finished),
            "dag_id": DAGS[kind], "airflow_url": f"/dags/{DAGS[kind]}/runs/{quote(dag_run, safe='')}",
            "report_url": check and f"{check}?format=html",
            "data_docs_url": check and facts.get("docs") and f"{check}/datadocs", "progress": None}  # fmt: skip


def _what(kind: str, facts: dict, src, dst) -> str:
    if kind == "switch":
        return f"ZSIDs {facts['zsids']} {src} -> {dst}"
    if kind == "copy":
        return f"{src} -> {dst} ({facts['mode']}), tables {', '.join(facts['tables']) or 'all replicated'}"
    if kind == "check":
        return f"zones {', '.join(facts['zones']) or 'all'}, tables {', '.join(facts['tables']) or 'all replicated'}"
    if kind == "backfill":
        return f"tags of zone {src}, tables {', '.join(facts['tables'])}"
    if kind == "schema":
        return f"{' '.join(facts['statement'].split())} in zones {', '.join(facts['zones'])}"
    return f"{facts['entity']} {src} -> {dst} ({facts['mode']})"


def progress(meta: MetaConfig, run: dict, zone_conn=None) -> dict | None:
    """A running run's chunks done of all, rows, rate (rows/s) and ETA (s), summed over its
    tables (the ETA of the slowest); None when it has no chunks yet, or they are out of
    reach (a zone down)."""
    if run["kind"] == "check":
        store = CheckStore(meta)
        check = store.require(run["run_id"])
        rows = [c for t in check.tables for c in as_done(store.chunks(run["run_id"], t))]
        return chunks.combined(chunks.summarize((), rows))
    if run["kind"] == "backfill":
        from zonesync.tagging.backfill_runs import BackfillRuns

        found = BackfillRuns(meta).get(run["run_id"])
        return None if found is None or not found["total"] else found
    if run["kind"] == "schema":
        return _drain(meta, run["run_id"], zone_conn)
    if run["kind"] == "migration":
        from zonesync.console import migration_progress
        from zonesync.migrate.store import MigrationStore

        found = MigrationStore(meta).get(run["run_id"])
        return None if found is None else migration_progress.progress(meta, found, zone_conn)
    if run["kind"] == "copy" and zone_conn is not None:
        run_id = run["run_id"]
        try:
            conn = zone_conn(run["target_zone"])
        except Exception:  # noqa: BLE001 - a zone out of reach: no progress shown, the rest of the page is
            return None
        try:
            return chunks.combined(chunks.summarize((), chunks.read(conn, run_id)))
        finally:
            conn.close()
    return None


def _drain(meta: MetaConfig, run_id: str, zone_conn) -> dict | None:
    """A schema change's drain of the events its holds parked (schema/runs.py)."""
    from zonesync.schema import runs as schema_runs

    found = schema_runs.get(meta, run_id)
    if found is None or found["drain"] is None or zone_conn is None:
        return None
    try:
        now = schema_runs.parked_now(zone_conn, list(found["drain"]), found["table"])
    except Exception:  # noqa: BLE001 - a zone out of reach: no progress shown, the rest of the page is
        return None
    (clock,), _ = meta.run("SELECT NOW(6)")
    return schema_runs.drain_progress(found["drain"], now, (clock[0] - found["resumed_at"]).total_seconds())


def text(run: dict) -> str:
    """A run on one line, as `zonesync runs` prints it."""
    line = f"{run['created_at'][:19]}  {run['kind']:<9} {run['status']:<11} {run['phase']:<12} {run['what']}"
    if run["window_ms"] is not None:
        line += f"  window {run['window_ms']:.0f} ms"
    p = run.get("progress")
    if p and "stage" in p:
        from zonesync.console.migration_progress import text as stage_text

        line += f"  {stage_text(p)}"
    elif p:
        line += f"  {p['done']}/{p['total']} {p.get('unit', 'chunks')}"
        if p["eta_s"]:
            line += f", about {p['eta_s']:,.0f} s left"
    return f"{line}\n    {run['run_id']}  by {run['actor']}: {run['reason']}"
