"""A check's report, built from meta: per table and zone pair, rows compared and chunks
that differ; per differing row its key, the zone that is right and what each other zone
has wrong. As a dict (the JSON file and the HTTP API), as text (`zonesync check report`)
and as one self-contained HTML page (linked from the task log)."""

from __future__ import annotations

import html

from zonesync.check.store import CheckStore
from zonesync.copy.chunks import progress_text, summarize


def build(meta, run_id: str, limit: int = 1000) -> dict:
    store = CheckStore(meta)
    run = store.require(run_id)
    tables = {}
    for t in run.tables:
        chunks = store.chunks(run_id, t)
        tables[t] = {
            **(run.summary.get(t) or {}),
            "progress": progress(t, chunks),
            "chunks_by_status": _count(c["status"] for c in chunks),
        }
    diffs = store.diffs(run_id, limit=limit)
    return {
        "run_id": run.run_id,
        "status": run.status,
        "phase": run.phase,
        "detail": run.detail,
        "zones": list(run.zones),
        "tables": tables,
        "actor": run.actor,
        "reason": run.reason,
        "rules_version": run.rules_version,
        "cut_us": run.cut_us,
        "start": run.start,
        "created_at": str(run.created_at),
        "finished_at": None if run.finished_at is None else str(run.finished_at),
        "expectations": run.summary.get("_expectations"),
        "event_counts": run.summary.get("_reconcile"),
        "differences": diffs,
        "differences_shown": len(diffs),
    }


def progress(table: str, chunks: list[dict]) -> str:
    """Chunks done of all, rows, rate and ETA of one table's check."""
    return progress_text(summarize((table,), as_done(chunks))[table])


def as_done(chunks: list[dict]) -> list[dict]:
    """A check's chunks as copy.chunks.summarize counts them: done once its numbers are in,
    whatever they say."""
    return [{**c, "status": "pending" if c["status"] == "pending" else "done"} for c in chunks]


def _count(values) -> dict:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _wrong(zones: dict) -> str:
    return "; ".join(f"{z}: {v if isinstance(v, str) else ', '.join(v)}" for z, v in sorted(zones.items()))


def text(report: dict) -> str:
    lines = [f"check {report['run_id']} ({report['status']}, {report['phase']}): zones {', '.join(report['zones'])}",
             f"  by {report['actor']}: {report['reason']}"]  # fmt: skip
    if report["detail"]:
        lines.append(f"  outcome: {report['detail']}")
    gx = report.get("expectations") or {}
    if gx:
        lines.append(
            f"  Great Expectations: {'passed' if gx.get('success') else 'FAILED'}; Data Docs {gx.get('data_docs')}"
        )
    for pair, c in sorted((report.get("event_counts") or {}).items()):
        lines.append(f"  events {pair}: {c['ok']} of {c['partitions']} partitions reconciled (published "
                     f"{c['published']:,} = committed {c['committed']:,}), {c['mismatch']} differ, "
                     f"{c['not_comparable']} not comparable now")  # fmt: skip
    for t, info in report["tables"].items():
        rows = ", ".join(f"{z} {n:,}" for z, n in (info.get("rows") or {}).items())
        lines.append(f"  {t}: {info['progress']}; rows {rows or '-'}; chunks {info['chunks_by_status']}")
        for pair, p in (info.get("pairs") or {}).items():
            if p["differ"]:
                lines.append(f"    {pair}: {p['differ']} of {p['chunks']} chunks differ")
        if (info.get("outcome") or {}).get("schema"):
            lines.append(f"    schema: {info['outcome']['schema']}")
    for d in report["differences"]:
        right = d["right"] or "no owner checked"
        repaired = f" -> repair: {d['repair']}" if d.get("repair") else ""
        lines.append(f"  {d['table']} {d['key']} (ZSID {d['zsid']}, right: {right}): {_wrong(d['zones'])}{repaired}")
    return "\n".join(lines)


def page(report: dict) -> str:
    """One HTML page, no script, no external resource."""
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(d['table'])}</td><td>{e(d['key'])}</td><td>{e(str(d['zsid']))}</td>"
        f"<td>{e(d['right'] or '-')}</td><td>{e(_wrong(d['zones']))}</td>"
        f"<td><code>{e(str(d['values']))}</code></td><td>{e(d.get('repair') or '-')}</td></tr>"
        for d in report["differences"]
    )
    tables = "".join(
        f"<tr><td>{e(t)}</td><td>{e(info['progress'])}</td><td>{e(str(info.get('rows', {})))}</td>"
        f"<td>{e(str(info['chunks_by_status']))}</td></tr>"
        for t, info in report["tables"].items()
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>zonesync check {e(report['run_id'])}</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:2px 6px}table{border-collapse:"
        "collapse}</style></head><body>"
        f"<h1>Consistency check {e(report['run_id'])}</h1><p>{e(report['status'])}: {e(report['detail'] or '')}</p>"
        f"<p>zones {e(', '.join(report['zones']))}; rules version {e(str(report['rules_version']))}</p>"
        f"<h2>Tables</h2><table><tr><th>table</th><th>progress</th><th>rows</th><th>chunks</th></tr>{tables}</table>"
        f"<h2>Differences ({report['differences_shown']})</h2><table><tr><th>table</th><th>key</th><th>ZSID</th>"
        f"<th>right</th><th>wrong</th><th>values</th><th>repair</th></tr>{rows}</table></body></html>"
    )
