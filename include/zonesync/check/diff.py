"""One differing key, told the way a report needs it (pure).

The Spark job hands over, per key whose rows are not the same in every zone, each zone's
row as it rendered it (zonesync.check.sql: version, origin, CRC and every column's
canonical text), zones lacking the key absent. This module decides:

- whether the difference can still be a write in flight: a row written after the
  check's cut (its version is the writer's clock, above the cut), or the key deleted
  after the cut in a zone that lacks it. Every zone applied every other zone up to the
  check's start before rows are compared, so anything older that differs persists;
- which zone is right: the owner of the row's ZSID by the check's rules version (its
  guard is the only one that writes the key). Without an owner among the checked zones
  (no rule covers the ZSID, or the owner was not checked) the first checked zone that
  holds the key is the reference, and `right` is None;
- what each other zone has wrong against the reference: the key `missing`, an `extra`
  key, or the columns that differ (the bookkeeping columns by their names).
"""

from __future__ import annotations

BOOKKEEPING_FIELDS = {"_v": "_zs_version", "_o": "_zs_origin"}


def in_flight(rows: dict[str, dict], zones: list[str], cut_us: int, deleted_after_cut: set[str],
              exclude_origin: int | None = None) -> bool:  # fmt: skip
    """Whether a write after the cut can explain the difference; or, in a check that
    leaves out what zone id `exclude_origin` wrote (a switch's new owner), whether a zone's
    row was written by it (it is on its way to the others)."""
    if any(int(r["_v"]) > cut_us for r in rows.values()):
        return True
    if exclude_origin is not None and any(int(r["_o"]) == int(exclude_origin) for r in rows.values()):
        return True
    return any(z not in rows and z in deleted_after_cut for z in zones)


def _columns_differing(a: dict, b: dict) -> list[str]:
    names = sorted(set(a["cols"]) | set(b["cols"]))
    out = [n for n in names if a["cols"].get(n) != b["cols"].get(n)]
    out += [name for f, name in BOOKKEEPING_FIELDS.items() if str(a[f]) != str(b[f]) and name not in out]
    return out


def describe(key: str, rows: dict[str, dict], zones: list[str], owner: str | None, zsid: int | None) -> dict | None:
    """The report's entry for one key (None when every checked zone holds the same row).

    `rows`: {zone: {"_v", "_o", "_zs_hash", "cols": {column: text or None}}}."""
    right = owner if owner in zones else None
    ref = right if right is not None else next((z for z in zones if z in rows), None)
    if ref is None:
        return None
    out: dict[str, object] = {}
    values: dict[str, dict] = {}
    for z in zones:
        if z == ref:
            continue
        if ref in rows and z not in rows:
            out[z] = "missing"
        elif ref not in rows and z in rows:
            out[z] = "extra"
        elif z in rows and str(rows[z]["_zs_hash"]) != str(rows[ref]["_zs_hash"]):
            cols = _columns_differing(rows[ref], rows[z])
            out[z] = cols or ["(row checksum only)"]
            for zone in (ref, z):
                values.setdefault(zone, {}).update({c: _value(rows[zone], c) for c in cols})
    if not out:
        return None
    return {"key": key, "zsid": zsid, "right": right, "reference": ref, "zones": out, "values": values}


def _value(row: dict, column: str):
    for f, name in BOOKKEEPING_FIELDS.items():
        if column == name:
            return str(row[f])
    return row["cols"].get(column)
