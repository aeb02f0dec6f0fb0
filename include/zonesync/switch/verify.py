"""After activate: are the moved ZSIDs' rows the same in from_zone and to_zone?

What to_zone wrote after activation is legitimately different for a while (it
is on its way back to from_zone), so rows whose `_zs_origin` is to_zone are left
out on both sides, and a row missing in to_zone counts as deleted there when
to_zone holds a tombstone at least as new. Everything else must match exactly:
it is what from_zone owned and wrote up to P, which wait_sync proved applied.

The scan reads whole tables through the client: right for the sample scale of
the local zones; a production-size comparison belongs to the Spark diff job.
"""

from __future__ import annotations

from zonesync.events import encode_row, pk_text
from zonesync.rules.extract import RuleIndex, ZsidUnknown
from zonesync.rules.model import RuleSet
from zonesync.runtime.endpoints import primary_key
from zonesync.switch.plan import SwitchRequest


def _in(spans, zsid: int) -> bool:
    return any(lo <= zsid <= hi for lo, hi in spans)


def _rows(conn, table: str, index: RuleIndex, spans) -> dict[str, dict]:
    pk = primary_key(conn, table)
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        out = {}
        for values in cur.fetchall():
            row = dict(zip(names, values, strict=True))
            try:
                zsid = index.zsid_of(table, row)
            except ZsidUnknown:
                continue
            if _in(spans, zsid):
                record = encode_row(row)
                out[pk_text({c: record[c] for c in pk})] = record
    return out


def _tombstones(conn, table: str) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("SELECT pk, version FROM zonesync.tombstones WHERE table_name = %s", (table,))
        return {pk: int(v) for pk, v in cur.fetchall()}


def compare_moved(zone_conn, rules: RuleSet, req: SwitchRequest, zone_ids: dict[str, int]) -> dict:
    index = RuleIndex(rules)
    new_owner = zone_ids[req.to_zone]
    mismatched: list[str] = []
    total = 0
    for table in sorted(rules.tables):
        conns = {z: zone_conn(z) for z in (req.from_zone, req.to_zone)}
        try:
            # from_zone first: a row to_zone rewrote that reached from_zone before this read
            # is then rewritten (or tombstoned) in to_zone's later read as well
            source = _rows(conns[req.from_zone], table, index, req.zsids)
            target = _rows(conns[req.to_zone], table, index, req.zsids)
            tombs = _tombstones(conns[req.to_zone], table)
        finally:
            for c in conns.values():
                c.close()
        keys = {k for k, r in source.items() if r.get("_zs_origin") != new_owner}
        keys |= {k for k, r in target.items() if r.get("_zs_origin") != new_owner}
        for key in sorted(keys):
            a, b = source.get(key), target.get(key)
            total += 1
            if (b is not None and b.get("_zs_origin") == new_owner) or (a and a.get("_zs_origin") == new_owner):
                continue  # rewritten by the new owner since
            if a is None and b is not None:
                mismatched.append(f"{table}{key}: only in {req.to_zone}")
            elif b is None:
                if tombs.get(key, -1) >= int(a.get("_zs_version") or 0):
                    continue  # deleted by the new owner since
                mismatched.append(f"{table}{key}: missing in {req.to_zone}")
            elif a != b:
                mismatched.append(f"{table}{key}: differs")
    return {"tables": len(rules.tables), "rows": total, "mismatched": mismatched}
