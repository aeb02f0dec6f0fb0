"""A copy's durable state in meta (table `copies`): resume = re-read it.

The run row is made by preflight (one per Airflow run id, a retried preflight
finds its own). The start positions and what the target's apply_state held
before are written once (`set_once`): a step killed after deciding and retried
reads its first decision back. One copy at a time per target zone: a second is
refused while the first is running.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync.meta.db import MetaConfig, MetaError

RUNNING, SUCCEEDED, FAILED, ROLLED_BACK = "running", "succeeded", "failed", "rolled_back"
ONCE = ("start_json", "before_json", "end_json")


@dataclass
class Copy:
    id: int
    run_id: str
    source_zone: str
    target_zone: str
    mode: str
    tables_json: str
    reason: str
    actor: str
    status: str
    phase: str
    start_json: str | None
    before_json: str | None
    end_json: str | None
    detail: str | None
    created_at: object
    updated_at: object
    finished_at: object

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(json.loads(self.tables_json))

    @property
    def request(self) -> CopyRequest:
        return CopyRequest(self.source_zone, self.target_zone, self.tables, self.mode, self.reason)

    def positions(self, which: str = "start_json") -> dict:
        raw = getattr(self, which)
        return {} if raw is None else json.loads(raw)


COLUMNS = ", ".join(f.name for f in fields(Copy))


class CopyStore:
    def __init__(self, meta: MetaConfig):
        self.meta = meta

    def get(self, run_id: str) -> Copy | None:
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM copies WHERE run_id = %s", (run_id,))
        return Copy(*rows[0]) if rows else None

    def require(self, run_id: str) -> Copy:
        found = self.get(run_id)
        if found is None:
            raise MetaError(f"no copy with run id {run_id!r}: `zonesync copies` lists them")
        return found

    def create(self, run_id: str, req: CopyRequest, actor: str) -> Copy:
        """The run's row; refused while another copy into the same target is running. A
        retried preflight finds the row it made."""
        with self.meta.transaction() as cur:
            # Creators take turns (a named lock, freed when the connection closes), then read
            # every running copy with a locking read: two checks by plain reads let a -> b and
            # b -> c both pass, each blind to the other's uncommitted row (write skew), and a
            # copy would read a zone while it is being filled.
            cur.execute("SELECT GET_LOCK(CONCAT(DATABASE(), '.copies.create'), 30)")
            if cur.fetchone()[0] != 1:
                raise CopyRefused("run_id: another copy is being created this moment; run the preflight again")
            cur.execute(
                "SELECT run_id, source_zone, target_zone FROM copies WHERE status = %s AND run_id <> %s "
                "ORDER BY id FOR UPDATE",
                (RUNNING, run_id),
            )
            running = cur.fetchall()
            same = next((r for r in running if r[2] == req.target_zone), None)
            if same:
                raise CopyRefused(
                    f"to: a copy into zone {req.target_zone} is already running ({same[0]}); wait for it "
                    f"(`zonesync copy status {same[0]}`) or roll it back"
                )
            # A zone being filled is no source: rows its chunks have not landed yet are in no
            # stream (merges are never published), so a copy from it would miss them for good.
            other = next((r for r in running if req.source_zone == r[2] or req.target_zone == r[1]), None)
            if other:
                raise CopyRefused(
                    f"from: copy {other[0]} ({other[1]} -> {other[2]}) is running: a zone being filled is no "
                    "source, and a copy's source is not filled meanwhile; wait for it or roll it back"
                )
            cur.execute(
                "INSERT IGNORE INTO copies (run_id, source_zone, target_zone, mode, tables_json, reason, actor) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (run_id, req.source_zone, req.target_zone, req.mode, json.dumps(list(req.tables)), req.reason[:500],
                 actor[:128]),
            )  # fmt: skip
        return self.require(run_id)

    def set_once(self, run_id: str, **values) -> Copy:
        """Store each JSON value unless one is there already; the row as stored."""
        unknown = set(values) - set(ONCE)
        if unknown:
            raise ValueError(f"not a write-once copy field: {sorted(unknown)}")
        sets = ", ".join(f"{k} = COALESCE({k}, %s)" for k in values)
        self.meta.run(
            f"UPDATE copies SET {sets} WHERE run_id = %s", (*[json.dumps(v) for v in values.values()], run_id)
        )
        return self.require(run_id)

    def phase(self, run_id: str, phase: str, detail: str | None = None) -> None:
        self.meta.run(
            "UPDATE copies SET phase = %s, detail = COALESCE(%s, detail) WHERE run_id = %s AND status = %s",
            (phase, detail, run_id, RUNNING),
        )

    def finish(self, run_id: str, status: str, detail: str) -> Copy:
        """End the run once (a later call keeps the first outcome)."""
        self.meta.run(
            "UPDATE copies SET status = %s, detail = %s, finished_at = NOW(6) WHERE run_id = %s AND status = %s",
            (status, detail[:4000], run_id, RUNNING),
        )
        return self.require(run_id)

    def history(self, limit: int = 20) -> list[Copy]:
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM copies ORDER BY id DESC LIMIT %s", (int(limit),))
        return [Copy(*r) for r in rows]
