"""Repair: each row a check found differing set, in every zone that has it wrong, to the
row its owner holds (docs/consistency-check.md).

The owner of a row's ZSID (by the check's rules version) is the only zone whose guard
writes the key, so its row is the truth. For one differing key:

1. the owner's row is read (or found absent). Read after the check: if the owner
   wrote the key since the cut (its version is above it), a newer write is on its way
   to every zone and there is nothing to repair: the key is left alone;
2. in each zone the check found wrong, in one transaction: the zone's row is locked
   (SELECT … FOR UPDATE; an absent key's gap is locked too); a row written since the
   cut, or a key deleted since the cut (its tombstone), is a write in flight and is
   left alone. Otherwise the zone gets the owner's exact row: every column, `_zs_origin`
   and `_zs_version` included, inserted, updated or, where the owner has no row,
   deleted with a tombstone (so a late replay of the old row stays away). The row is
   read back before the commit and must equal the owner's, else the transaction rolls
   back and the key is reported as not repaired.

Why the owner's exact image, not the full copy's version-guarded upsert: the copy's
rule (the newer version wins) cannot mend a row whose version equals the owner's but
whose values do not (a write behind zonesync's back, a restored backup), the common
damage; and the applier's next change of the row carries the owner's old image, which
lands only where the row is exactly that image. Where the owner's version is newer the
two agree. The compare-and-set under the row lock makes it safe beside the appliers: an
applier's change of the key either committed first (the version is then above the cut:
left alone) or waits for the lock and meets the owner's row, its expected old image.

Repair writes with skip_replication, as the copy and the appliers do: the repaired
zone's replicator does not publish the repair. Rows whose owner was not among the
checked zones (no right zone named) are not repaired: the report says so.

Each outcome is stored with its difference (check_diffs.repair): repaired (inserted,
updated, deleted), or why not.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from zonesync.apply.bookkeeping import tombstones
from zonesync.apply.tools.owner_row import put_row, read_row
from zonesync.check.store import CheckStore
from zonesync.copy.chunks import key_columns


def key_values(key_text: str, key: list[str]) -> dict:
    """The key columns' values of a difference's key text (events.pk_text: column-name order)."""
    values = json.loads(key_text)
    names = sorted(key)
    if not isinstance(values, list) or len(values) != len(names):
        raise ValueError(f"key {key_text!r} does not fit the primary key ({', '.join(names)})")
    return dict(zip(names, values, strict=True))


def _deleted_at(cur, table: str, key_text: str):
    """When the key's tombstone in this zone was written (locked); None: no tombstone."""
    cur.execute("SELECT deleted_at FROM zonesync.tombstones WHERE table_name = %s AND pk = %s FOR UPDATE",
                (table, key_text))  # fmt: skip
    row = cur.fetchone()
    return None if row is None else row[0]


def fix_zone(conn, table: str, key: dict, key_text: str, owner_row: dict | None, cut_us: int) -> str:
    """Set one key of one zone to the owner's row (None: no row), compare-and-set under the
    row lock; the outcome. Commits or rolls back."""
    import datetime as dt

    cut = dt.datetime.fromtimestamp(cut_us / 1_000_000, dt.UTC).replace(tzinfo=None)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00', SESSION skip_replication = 1")
            row = read_row(cur, table, key, lock=True)
            if row is not None and int(row["_zs_version"]) > cut_us:
                return _leave(conn, "left: written in this zone since the check")
            deleted_at = _deleted_at(cur, table, key_text)
            if row is None and deleted_at is not None and deleted_at > cut:
                return _leave(conn, "left: deleted in this zone since the check")
            if row == owner_row:
                return _leave(conn, "left: already the owner's row")
            if owner_row is None:
                # the applier's tombstone of a delete: the row's version + 1
                cur.execute(
                    tombstones.record(conn.escape, conn.escape(table), [(key_text, int(row["_zs_version"]) + 1)])
                )
                outcome = "deleted"
            elif row is None:
                # the owner holds the row: a tombstone here is older than the cut and wrong
                cur.execute("DELETE FROM zonesync.tombstones WHERE table_name = %s AND pk = %s", (table, key_text))
                outcome = "inserted"
            else:
                outcome = "updated"
            put_row(cur, table, key, owner_row)
            if read_row(cur, table, key) != owner_row:
                return _leave(conn, "not repaired: the zone does not store the owner's row alike (column types?)")
        conn.commit()
        return outcome
    except Exception:
        conn.rollback()
        raise


def _leave(conn, outcome: str) -> str:
    conn.rollback()
    return outcome


def repair(store: CheckStore, run_id: str, zone_conn: Callable, app_db: str, log=print) -> dict[str, int]:
    """Repair every difference of a run not repaired yet; counts by outcome. Idempotent:
    a retried step re-reads each outcome and repairs what has none."""
    run = store.require(run_id)
    counts: dict[str, int] = {}
    conns: dict[str, object] = {}
    keys: dict[str, list[str]] = {}  # table -> its primary key's columns
    try:
        for d in store.diffs(run_id, limit=1_000_000):
            if d.get("repair"):
                counts[d["repair"]] = counts.get(d["repair"], 0) + 1
                continue
            outcome = _repair_one(d, run, conns, keys, zone_conn, app_db)
            store.set_repair(run_id, d["table"], d["key"], outcome)
            counts[outcome] = counts.get(outcome, 0) + 1
    finally:
        for c in conns.values():
            c.close()
    log(f"check {run_id}: repair: {json.dumps(counts)}")
    return counts


def _repair_one(d: dict, run, conns: dict, keys: dict, zone_conn: Callable, app_db: str) -> str:
    """One difference: the owner's row read, then set in each zone that has it wrong; the
    difference's outcome (per zone when they differ)."""

    def conn(z):
        if z not in conns:
            conns[z] = zone_conn(z)
        return conns[z]

    right = d["right"]
    if right is None:
        return "left: no owner among the checked zones; repair by hand"
    table = d["table"]
    if table not in keys:
        keys[table] = [c for c, _ in key_columns(conn(right), app_db, table)]
    key = key_values(d["key"], keys[table])
    owner = conn(right)
    with owner.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        owner_row = read_row(cur, table, key)
    owner.commit()
    if owner_row is not None and int(owner_row["_zs_version"]) > run.cut_us:
        return "left: written by its owner since the check"
    outcomes = {z: fix_zone(conn(z), table, key, d["key"], owner_row, run.cut_us) for z in sorted(d["zones"])}
    if len(set(outcomes.values())) == 1:
        return next(iter(outcomes.values()))
    return "; ".join(f"{z}: {o}" for z, o in outcomes.items())
