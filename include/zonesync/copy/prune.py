"""Rows the target holds and the source lacks: deleted only when that is certain.

A target may hold rows its source does not: rows the source deleted while the target
was broken or away (they must go), but also the target's own fresh writes and rows
another zone wrote that reached the target before the source (they must stay). The
rule (docs/copy.md, "Rows only the target has"):

    A target row (key k, version V) the source lacks is deleted when k's ZSID has an
    ACTIVE owner W other than the target, W has applied every zone's writes up to where
    each stood when the row copy ended, and W lacks k, looked up after V was read.
    Only version V is deleted (a newer version that arrived meanwhile stays), with a
    tombstone at V (a late copy of V never comes back), and nothing is published.

W is the only zone whose guard writes k, and a ZSID's new owner applied its old owner's
writes before it became ACTIVE (the zone switch), so W lacking k after V existed means k
was deleted at or after V. The target's own rows (W = the target) are never deleted;
neither are rows of ZSIDs in a switch (BLOCK, RESHARDING): nobody can vouch for them.

The Spark job finds the candidates (an anti-join of the target's keys against the
source's, read in key ranges from both) and stages their keys in the target; the
prune step reads those rows as they are then, and looks them up in their owners, a
batch of keys per query.
"""

from __future__ import annotations

from collections import defaultdict

from zonesync.copy.chunks import q
from zonesync.copy.merge import STAGE_DB
from zonesync.rules.extract import RuleIndex, ZsidUnknown
from zonesync.rules.model import ACTIVE

BATCH = 1000


def orphans_name(stage: str) -> str:
    return f"{stage}_orphans"


def candidates(conn, app_db: str, table: str, stage: str, key_cols: list[str]) -> list[dict]:
    """The target's rows (as they are now) whose keys the Spark job found missing in the
    source; none when it staged nothing."""
    orphans = f"{q(STAGE_DB)}.{q(orphans_name(stage))}"
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (STAGE_DB, orphans_name(stage)),
        )
        if not cur.fetchone()[0]:
            conn.commit()
            return []
        on = " AND ".join(f"t.{q(c)} = o.{q(c)}" for c in key_cols)
        cur.execute(f"SELECT t.* FROM {orphans} o JOIN {q(app_db)}.{q(table)} t ON {on}")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    conn.commit()
    return rows


def owners(rules, table: str, target: str, rows: list[dict]) -> tuple[dict[str, list[dict]], int]:
    """Candidates by the ACTIVE owner zone of their ZSID (pure); rows whose owner is the
    target, or whose ZSID is in a switch or cannot be computed, are kept (counted)."""
    index = RuleIndex(rules)
    by_owner: dict[str, list[dict]] = defaultdict(list)
    kept = 0
    for row in rows:
        try:
            rule = index.rule_for(index.zsid_of(table, row))
        except ZsidUnknown:
            kept += 1
            continue
        if rule.status != ACTIVE or rule.zone == target:
            kept += 1
            continue
        by_owner[rule.zone].append(row)
    return dict(by_owner), kept


def absent_in(conn, table: str, key_cols: list[str], rows: list[dict]) -> list[dict]:
    """The rows whose keys the zone does not hold (one query per BATCH keys)."""
    out = []
    with conn.cursor() as cur:
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            keys = [tuple(int(r[c]) for c in key_cols) for r in batch]
            if len(key_cols) == 1:
                cond = f"{q(key_cols[0])} IN ({', '.join(str(k[0]) for k in keys)})"
            else:
                cols = "(" + ", ".join(q(c) for c in key_cols) + ")"
                cond = f"{cols} IN ({', '.join('(' + ', '.join(map(str, k)) + ')' for k in keys)})"
            cur.execute(f"SELECT {', '.join(q(c) for c in key_cols)} FROM {q(table)} WHERE {cond}")
            found = {tuple(int(v) for v in r) for r in cur.fetchall()}
            out += [r for r, k in zip(batch, keys, strict=True) if k not in found]
    conn.commit()
    return out


def delete_versions(conn, table: str, key_cols: list[str], rows: list[dict]) -> int:
    """Delete exactly these versions of these rows, each with a tombstone at its version,
    unpublished (skip_replication); the number deleted."""
    from zonesync.events import pk_text

    deleted = 0
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        for r in rows:
            key = {c: int(r[c]) for c in key_cols}
            where = " AND ".join(f"{q(c)} = {v}" for c, v in key.items())
            n = cur.execute(f"DELETE FROM {q(table)} WHERE {where} AND `_zs_version` = %s", (int(r["_zs_version"]),))
            if n:
                cur.execute(
                    "INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES (%s, %s, %s) "
                    "ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version)), deleted_at = NOW(6)",
                    (table, pk_text(key), int(r["_zs_version"])),
                )
            deleted += n
        cur.execute("SET SESSION skip_replication = 0")
    conn.commit()
    return deleted
