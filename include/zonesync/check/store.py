"""A consistency check's durable state in meta (tables checks, check_chunks,
check_diffs): resume = re-read it.

The run row is made by the DAG's first step, once per Airflow run id (a retried step
finds its own); the start (positions, cut, rules version) is written once. The Spark
job writes the plan, each chunk's numbers as a wave finishes, and the differences
that persisted; the report reads them all back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from zonesync.meta.db import MetaConfig, MetaError

RUNNING, SUCCEEDED, DIFFERENCES, FAILED = "running", "succeeded", "differences", "failed"
DONE = ("match", "settled", "mismatch")  # a chunk in one of these is not looked at again


@dataclass
class Check:
    id: int
    run_id: str
    zones_json: str
    tables_json: str
    chunk_rows: int
    row_diff: int
    repair: int
    reason: str
    actor: str
    status: str
    phase: str
    rules_version: int | None
    cut_us: int | None
    start_json: str | None
    summary_json: str | None
    detail: str | None
    created_at: object
    updated_at: object
    finished_at: object
    zsids_json: str | None = None  # [[lo, hi], ...]: only these ZSIDs' rows (the switch's verify)
    exclude_origin: int | None = None  # rows written by this zone id left out (the switch's new owner)
    entities_json: str | None = None  # {type: [id, ...]}: only these entities' rows (a migration's verify)

    @property
    def zsids(self) -> list[tuple[int, int]]:
        return [] if self.zsids_json is None else [(int(lo), int(hi)) for lo, hi in json.loads(self.zsids_json)]

    @property
    def entities(self) -> dict[str, list[str]]:
        return {} if self.entities_json is None else json.loads(self.entities_json)

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(json.loads(self.zones_json))

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(json.loads(self.tables_json))

    @property
    def start(self) -> dict:
        return {} if self.start_json is None else json.loads(self.start_json)

    @property
    def summary(self) -> dict:
        return {} if self.summary_json is None else json.loads(self.summary_json)


COLUMNS = ", ".join(f.name for f in fields(Check))
REPAIRED = ("inserted", "updated", "deleted")  # what repair did with a difference it mended (check_diffs.repair)


class CheckStore:
    def __init__(self, meta: MetaConfig):
        self.meta = meta

    # -- the run -----------------------------------------------------------------
    def get(self, run_id: str) -> Check | None:
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM checks WHERE run_id = %s", (run_id,))
        return Check(*rows[0]) if rows else None

    def require(self, run_id: str) -> Check:
        found = self.get(run_id)
        if found is None:
            raise MetaError(f"no check with run id {run_id!r}: `zonesync checks` lists them")
        return found

    def create(self, run_id: str, zones, tables, chunk_rows: int, row_diff: bool, repair: bool, reason: str,
               actor: str, zsids=(), exclude_origin: int | None = None, entities=()) -> Check:  # fmt: skip
        self.meta.run(
            "INSERT IGNORE INTO checks (run_id, zones_json, tables_json, chunk_rows, row_diff, repair, reason, actor, "
            "zsids_json, exclude_origin, entities_json) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (run_id, json.dumps(list(zones)), json.dumps(list(tables)), int(chunk_rows), int(bool(row_diff)),
             int(bool(repair)), reason[:500], actor[:128], json.dumps([list(s) for s in zsids]) if zsids else None,
             exclude_origin, json.dumps({t: list(ids) for t, ids in entities}) if entities else None),
        )  # fmt: skip
        return self.require(run_id)

    def set_start(self, run_id: str, rules_version: int, cut_us: int, positions: dict) -> Check:
        """The start, written once: a retried step reads the first decision back."""
        self.meta.run(
            "UPDATE checks SET rules_version = COALESCE(rules_version, %s), cut_us = COALESCE(cut_us, %s), "
            "start_json = COALESCE(start_json, %s) WHERE run_id = %s",
            (int(rules_version), int(cut_us), json.dumps(positions), run_id),
        )
        return self.require(run_id)

    def phase(self, run_id: str, phase: str, detail: str | None = None) -> None:
        self.meta.run(
            "UPDATE checks SET phase = %s, detail = COALESCE(%s, detail) WHERE run_id = %s AND status = %s",
            (phase, detail, run_id, RUNNING),
        )

    def set_summary(self, run_id: str, summary: dict) -> None:
        self.meta.run("UPDATE checks SET summary_json = %s WHERE run_id = %s", (json.dumps(summary), run_id))

    def finish(self, run_id: str, status: str, detail: str) -> Check:
        """End the run once (a later call keeps the first outcome)."""
        self.meta.run(
            "UPDATE checks SET status = %s, detail = %s, finished_at = NOW(6) WHERE run_id = %s AND status = %s",
            (status, detail[:4000], run_id, RUNNING),
        )
        return self.require(run_id)

    def history(self, limit: int = 20) -> list[Check]:
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM checks ORDER BY id DESC LIMIT %s", (int(limit),))
        return [Check(*r) for r in rows]

    # -- chunks ------------------------------------------------------------------
    def chunks(self, run_id: str, table: str) -> list[dict]:
        rows, _ = self.meta.run(
            "SELECT chunk_no, lo, hi, status, rows_max, zones_json, done_at FROM check_chunks "
            "WHERE run_id = %s AND table_name = %s ORDER BY chunk_no",
            (run_id, table),
        )
        return [
            {"table": table, "chunk": int(n), "lo": None if lo is None else json.loads(lo),
             "hi": None if hi is None else json.loads(hi), "status": st, "rows_read": int(rm),
             "zones": {} if zj is None else json.loads(zj), "done_at": done}
            for n, lo, hi, st, rm, zj, done in rows
        ]  # fmt: skip

    def add_chunk(self, run_id: str, table: str, n: int, lo, hi):
        """Store chunk n as (lo, hi) unless it is stored already; the upper bound it has."""
        with self.meta.transaction() as cur:
            cur.execute(
                "INSERT IGNORE INTO check_chunks (run_id, table_name, chunk_no, lo, hi) VALUES (%s, %s, %s, %s, %s)",
                (run_id, table, n, None if lo is None else json.dumps(lo), None if hi is None else json.dumps(hi)),
            )
            if cur.rowcount == 0:
                cur.execute(
                    "SELECT hi FROM check_chunks WHERE run_id = %s AND table_name = %s AND chunk_no = %s",
                    (run_id, table, n),
                )
                (stored,) = cur.fetchone()
                hi = None if stored is None else json.loads(stored)
        return hi

    def record_chunks(self, run_id: str, table: str, results: dict[int, tuple[str, dict]]) -> None:
        """{chunk: (status, {zone: numbers})} of one wave, committed together."""
        if not results:
            return
        with self.meta.transaction() as cur:
            cur.executemany(
                "UPDATE check_chunks SET status = %s, zones_json = %s, rows_max = %s, done_at = NOW(6) "
                "WHERE run_id = %s AND table_name = %s AND chunk_no = %s",
                [(status, json.dumps(zones), max((v[0] for v in zones.values()), default=0), run_id, table, n)
                 for n, (status, zones) in results.items()],
            )  # fmt: skip

    # -- differences -------------------------------------------------------------
    def add_diffs(self, run_id: str, table: str, diffs: list[dict]) -> None:
        if not diffs:
            return
        with self.meta.transaction() as cur:
            cur.executemany(
                "INSERT INTO check_diffs (run_id, table_name, pk, zsid, right_zone, zones_json, values_json) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE zsid = VALUES(zsid), "
                "right_zone = VALUES(right_zone), zones_json = VALUES(zones_json), values_json = VALUES(values_json)",
                [(run_id, table, d["key"], d["zsid"], d["right"], json.dumps(d["zones"]), json.dumps(d["values"]))
                 for d in diffs],
            )  # fmt: skip

    def diffs(self, run_id: str, table: str | None = None, limit: int = 10_000) -> list[dict]:
        where, args = "run_id = %s", [run_id]
        if table is not None:
            where, args = where + " AND table_name = %s", [*args, table]
        rows, _ = self.meta.run(
            f"SELECT table_name, pk, zsid, right_zone, zones_json, values_json, repair FROM check_diffs WHERE {where} "
            "ORDER BY table_name, id LIMIT %s",
            (*args, int(limit)),
        )
        return [
            {"table": t, "key": pk, "zsid": zsid, "right": right, "zones": json.loads(zj),
             "values": {} if vj is None else json.loads(vj), "repair": repair}
            for t, pk, zsid, right, zj, vj, repair in rows
        ]  # fmt: skip

    def diff_counts(self, run_id: str) -> tuple[int, int]:
        """(differing rows, of them repaired) of a run, counted in meta."""
        marks = ", ".join(f"'{o}'" for o in REPAIRED)
        rows, _ = self.meta.run(
            f"SELECT COUNT(*), COALESCE(SUM(repair IN ({marks})), 0) FROM check_diffs WHERE run_id = %s", (run_id,)
        )
        return int(rows[0][0]), int(rows[0][1])

    def set_repair(self, run_id: str, table: str, pk: str, outcome: str) -> None:
        """What repair did with one difference (zonesync.check.repair)."""
        self.meta.run("UPDATE check_diffs SET repair = %s WHERE run_id = %s AND table_name = %s AND pk = %s",
                      (outcome[:250], run_id, table, pk))  # fmt: skip
