"""The mesh as the console shows it: each zone and its health, and the ZSID space of the
current rules version as ranges per zone, with the ranges a running switch moves.

A zone is healthy when every part that serves it reports: its guards' heartbeats (meta's
clock, guards.py), its replicator's lease and capture-lag report, and an applier report
for every other zone as source. Anything else is named in `problems`, in words an
operator can act on; open alerts are counted per zone.
"""

from __future__ import annotations

from zonesync.apply.tools.progress import STALE_AFTER_S, lag_report
from zonesync.capture import lag as capture_lag
from zonesync.meta import guards
from zonesync.meta.db import MetaConfig
from zonesync.meta.store import MetaStore
from zonesync.switch.plan import parse_zsids


def zones(meta: MetaConfig) -> list[dict]:
    """Every zone: id, health, its guards, replicator, appliers (per source) and open alerts."""
    names = MetaStore(meta).zones()
    instances = guards.list_instances(meta)
    leases = {z: (holder, float(left)) for z, holder, left in meta.run(
        "SELECT zone, holder, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at) / 1e6 "
        "FROM replicator_leases")[0]}  # fmt: skip
    capture = {z: (behind, sec, age) for z, behind, sec, age in capture_lag.report(meta)}
    applied: dict[str, dict] = {}
    for s, t, ev, sec, age, _ in lag_report(meta):
        applied.setdefault(t, {})[s] = {"behind_events": ev, "behind_seconds": sec, "reported_s_ago": round(age, 1)}
    alerts = dict(meta.run("SELECT zone, COUNT(*) FROM alerts WHERE acked = 0 GROUP BY zone")[0])
    out = []
    for name, zone_id in sorted(names.items(), key=lambda kv: kv[1]):
        mine = [g for g in instances if g.zone == name]
        doc = {
            "zone": name,
            "id": zone_id,
            "guards": {
                "total": len(mine),
                "healthy": sum(g.healthy for g in mine),
                "versions": sorted({g.version_applied for g in mine}),
            },  # fmt: skip
            "replicator": _replicator(leases.get(name), capture.get(name)),
            "appliers": applied.get(name, {}),
            "open_alerts": int(alerts.get(name, 0)),
        }
        doc["problems"] = problems(doc, [z for z in names if z != name])
        doc["health"] = "healthy" if not doc["problems"] else "degraded"
        out.append(doc)
    return out


def _replicator(lease, capture) -> dict:
    holder, left = lease if lease else (None, None)
    doc = {"holder": holder, "lease_left_s": None if left is None else round(left, 1)}
    if capture:
        doc.update(behind_bytes=capture[0], behind_seconds=capture[1], reported_s_ago=round(capture[2], 1))
    return doc


def problems(doc: dict, sources: list[str]) -> list[str]:
    """What keeps a zone from healthy, each in words an operator can act on (pure)."""
    out = []
    g = doc["guards"]
    if g["healthy"] < g["total"]:
        out.append(f"{g['total'] - g['healthy']} of {g['total']} guards missed their heartbeats (`zonesync guards`)")
    rep = doc["replicator"]
    if rep["holder"] is None or (rep["lease_left_s"] or 0) <= 0:
        out.append("no replicator holds the zone's lease: start one (`zonesync replicate --zone NAME`)")
    elif rep.get("reported_s_ago") is None or rep["reported_s_ago"] > STALE_AFTER_S:
        out.append("the replicator has not reported its capture lag lately")
    for source in sorted(sources):
        got = doc["appliers"].get(source)
        if got is None:
            out.append(f"no applier has reported applying {source}'s changes")
        elif got["reported_s_ago"] > STALE_AFTER_S:
            out.append(f"the applier of {source}'s changes last reported {got['reported_s_ago']:.0f} s ago (stopped?)")
    if doc["open_alerts"]:
        out.append(f"{doc['open_alerts']} open alerts (`zonesync alerts`)")
    return out


def zone_map(meta: MetaConfig) -> dict:
    """The current rules version's ZSID ranges, in order, each with its owner and status
    (ACTIVE, BLOCK, RESHARDING), and the ranges running switches move: what the page's
    zone map draws. {"version": None, ...} before any rules are published."""
    found = MetaStore(meta).rules_at()
    head = MetaStore(meta).head()
    moving = []
    for run_id, zsids, src, dst in meta.run(
        "SELECT run_id, zsids, from_zone, to_zone FROM switches WHERE status = 'running' ORDER BY id"
    )[0]:
        for lo, hi in parse_zsids(zsids):
            moving.append({"lo": lo, "hi": hi, "from": src, "to": dst, "run_id": run_id})
    if found is None:
        return {"version": None, "head": head, "zsid_min": None, "zsid_max": None, "ranges": [], "moving": moving}
    version, rules = found
    ranges = [{"lo": r.lo, "hi": r.hi, "zone": r.zone, "status": r.status} for r in rules.rules]
    return {"version": version, "head": head, "zsid_min": rules.zsid_min, "zsid_max": rules.zsid_max,
            "ranges": ranges, "moving": moving}  # fmt: skip
