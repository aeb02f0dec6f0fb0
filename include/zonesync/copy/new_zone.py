"""Adding a zone to the mesh (seed S002-15, online standby enablement; S000-78).

A new zone starts empty. Its appliers must not apply the others' streams from their
beginning: the topics may no longer hold it (retention), and a change of a row the
zone does not have yet would wait and then lock it, before any copy came. So a zone
is added fenced:

1. its `zonesync` bookkeeping database is created (include/sql/zone/*.sql);
2. every partition of every other zone's stream is recorded in its apply_state as
   halted, "waiting for its full copy": its appliers, once started, hold still;
3. only then is it registered in meta, so a copy can name it.

The add-zone copy (`zonesync copy --from a --to d --mode add-zone`) then moves those
partitions to its start positions and sets them running (positions.py: a partition
that never ran starts where the copy's rows end), and after the copy joins the zone is
a normal member. Giving it ZSIDs is a zone switch, later, like for any zone.
"""

from __future__ import annotations

from pathlib import Path

from zonesync import config
from zonesync.copy.request import CopyRefused
from zonesync.sql_names import is_zone_name

BOOKKEEPING = config.REPO_ROOT / "include" / "sql" / "zone"
MAX_ZONE_ID = 16  # zones run with auto_increment_increment=16, offset = zone id (table contract)


def run_sql_file(conn, path: Path) -> None:
    """The statements of an idempotent DDL file (`;`-separated, `--` comments)."""
    lines = [line for line in path.read_text().splitlines() if not line.strip().startswith("--")]
    with conn.cursor() as cur:
        for stmt in (s.strip() for s in "\n".join(lines).split(";")):
            if stmt:
                cur.execute(stmt)
    conn.commit()


def fence_note(name: str) -> str:
    return f"new zone {name}: waiting for its full copy (zonesync copy --from <zone> --to {name} --mode add-zone)"


def add_zone(meta, name: str, zone_conn, partitions: int, zone_id: int | None = None) -> int:
    """Add zone `name` (its database reachable through `zone_conn()`) fenced, as above; its
    zone id. CopyRefused, with nothing changed, for a bad or taken name or id."""
    from zonesync.meta.store import MetaStore

    if not is_zone_name(name):
        raise CopyRefused(f"name: {name!r} is not a zone name (lower-case letters, digits, _; e.g. 'd')")
    store = MetaStore(meta)
    zones = store.zones()
    if name in zones:
        raise CopyRefused(f"name: zone {name} is already a member (id {zones[name]}); `zonesync zones` lists them")
    zone_id = zone_id if zone_id is not None else max(zones.values(), default=0) + 1
    if zone_id in zones.values() or not 1 <= zone_id <= MAX_ZONE_ID:
        raise CopyRefused(f"id: {zone_id} is taken or outside 1..{MAX_ZONE_ID}; give a free one with --id")
    conn = zone_conn()
    try:
        for path in sorted(BOOKKEEPING.glob("*.sql")):
            run_sql_file(conn, path)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT IGNORE INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset, "
                "status, detail) VALUES (%s, %s, 0, -1, 'halted', %s)",
                [(source, p, fence_note(name)) for source in sorted(zones) for p in range(partitions)],
            )
        conn.commit()
    finally:
        conn.close()
    store.ensure_zones([(zone_id, name)], actor=f"zonesync zones add {name}")
    return zone_id
