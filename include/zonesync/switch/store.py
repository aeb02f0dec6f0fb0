"""A switch's durable state in meta: the switch row, its steps, and its ZSID lease.

Resume = re-read state (Vitess vreplication style). Every decision a step makes
(the recorded version, each published version, T, the sync position P) is
written once with `set_once`, which keeps a value already there: a step killed
after deciding and retried reads its first decision back instead of making a
second one. That is what makes record_state safe to re-run after block already
pushed (S000-14), and block/reshard/activate safe to re-run after they published.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from zonesync.meta.db import MetaConfig, MetaError
from zonesync.switch.plan import Span, SwitchRequest, format_zsids, overlaps, parse_zsids

RUNNING, SUCCEEDED, ROLLED_BACK, FAILED = "running", "succeeded", "rolled_back", "failed"
ONCE_FIELDS = {
    "recorded_version",
    "block_version",
    "reshard_version",
    "active_version",
    "rollback_version",
    "blocked_at",
    "block_acked_at",
    "resharding_at",
    "sync_file",
    "sync_pos",
    "synced_at",
    "activated_at",
}


class LeaseConflict(MetaError):
    pass


@dataclass
class Switch:
    id: int
    run_id: str
    zsids: str
    from_zone: str
    to_zone: str
    reason: str
    actor: str
    status: str
    phase: str
    recorded_version: int | None
    block_version: int | None
    reshard_version: int | None
    active_version: int | None
    rollback_version: int | None
    blocked_at: object
    block_acked_at: object
    resharding_at: object
    sync_file: str | None
    sync_pos: int | None
    synced_at: object
    activated_at: object
    detail: str | None
    created_at: object
    finished_at: object

    @property
    def request(self) -> SwitchRequest:
        return SwitchRequest(tuple(parse_zsids(self.zsids)), self.from_zone, self.to_zone, self.reason)

    @property
    def window_ms(self) -> float | None:
        """How long the moved ZSIDs were writable nowhere: BLOCK published to ACTIVE acked."""
        if self.blocked_at is None or self.activated_at is None:
            return None
        return (self.activated_at - self.blocked_at).total_seconds() * 1000


COLUMNS = ", ".join(f.name for f in fields(Switch))


class SwitchStore:
    def __init__(self, meta: MetaConfig):
        self.meta = meta

    def _one(self, sql: str, args=()) -> Switch | None:
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM switches WHERE {sql}", args)
        return Switch(*rows[0]) if rows else None

    def get(self, run_id: str) -> Switch | None:
        return self._one("run_id = %s", (run_id,))

    def require(self, run_id: str) -> Switch:
        sw = self.get(run_id)
        if sw is None:
            raise MetaError(f"no switch with run id {run_id!r}: `zonesync switches` lists them")
        return sw

    def create(self, run_id: str, req: SwitchRequest, actor: str) -> Switch:
        """The switch row for a run; a retried preflight finds the one it made."""
        self.meta.run(
            "INSERT IGNORE INTO switches (run_id, zsids, from_zone, to_zone, reason, actor) VALUES (%s,%s,%s,%s,%s,%s)",
            (run_id, req.zsids_text, req.from_zone, req.to_zone, req.reason[:500], actor[:128]),
        )
        return self.require(run_id)

    def set_once(self, run_id: str, **values) -> Switch:
        """Store each value unless one is already there; return the row as stored."""
        unknown = set(values) - ONCE_FIELDS
        if unknown:
            raise ValueError(f"not a write-once switch field: {sorted(unknown)}")
        sets = ", ".join(f"{k} = COALESCE({k}, %s)" for k in values)
        self.meta.run(f"UPDATE switches SET {sets} WHERE run_id = %s", (*values.values(), run_id))
        return self.require(run_id)

    def stamp_once(self, run_id: str, field: str) -> Switch:
        """Set a time field to the meta store's clock, once (one clock for every step: S000-28)."""
        if field not in ONCE_FIELDS or not field.endswith("_at"):
            raise ValueError(f"not a write-once time field: {field}")
        self.meta.run(f"UPDATE switches SET {field} = COALESCE({field}, NOW(6)) WHERE run_id = %s", (run_id,))
        return self.require(run_id)

    def claim_phase(self, run_id: str, phase: str) -> bool:
        """Enter 'activating' or 'rolling_back', unless the other one was entered first.

        The point of no return as one conditional update: activate and rollback can
        never both publish, whatever Airflow does with the tasks (a cleared task, a
        duplicate run of one)."""
        other = {"activating": "rolling_back", "rolling_back": "activating"}[phase]
        self.meta.run("UPDATE switches SET phase = %s WHERE run_id = %s AND phase <> %s", (phase, run_id, other))
        rows, _ = self.meta.run("SELECT phase FROM switches WHERE run_id = %s", (run_id,))
        return bool(rows) and rows[0][0] == phase

    def finish(self, run_id: str, status: str, detail: str = "") -> None:
        self.meta.run(
            "UPDATE switches SET status = %s, detail = %s, finished_at = NOW(6) WHERE run_id = %s",
            (status, detail[:60000], run_id),
        )

    def ms_until_after_block(self, run_id: str, plus_ms: int) -> float:
        """Milliseconds until the BLOCK acks (else T) + plus_ms, on the meta store's clock."""
        rows, _ = self.meta.run(
            "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), COALESCE(block_acked_at, resharding_at) "
            "+ INTERVAL %s MICROSECOND) / 1000 FROM switches WHERE run_id = %s",
            (int(plus_ms) * 1000, run_id),
        )
        return float(rows[0][0]) if rows and rows[0][0] is not None else 0.0

    # -- steps ---------------------------------------------------------------
    def step_started(self, switch_id: int, step: str) -> None:
        self.meta.run(
            "INSERT INTO switch_steps (switch_id, step, status) VALUES (%s, %s, 'running') ON DUPLICATE KEY "
            "UPDATE attempt = attempt + 1, status = 'running', started_at = NOW(6), finished_at = NULL, detail = NULL",
            (switch_id, step),
        )

    def step_finished(self, switch_id: int, step: str, status: str, detail: str = "") -> None:
        self.meta.run(
            "UPDATE switch_steps SET status = %s, detail = %s, finished_at = NOW(6) WHERE switch_id = %s AND step = %s",
            (status, detail[:60000], switch_id, step),
        )

    def gates(self, switch_id: int) -> list[tuple[str, float | None, str]]:
        """(task, seconds it waited at its gate or None while it waits, passed/left/waiting), in arrival order."""
        rows, _ = self.meta.run(
            "SELECT task, TIMESTAMPDIFF(MICROSECOND, entered_at, COALESCE(passed_at, left_at)), "
            "CASE WHEN passed_at IS NOT NULL THEN 'passed' WHEN left_at IS NOT NULL THEN 'left' ELSE 'waiting' END "
            "FROM switch_gates WHERE switch_id = %s ORDER BY entered_at",
            (switch_id,),
        )
        return [(task, None if us is None else int(us) / 1e6, state) for task, us, state in rows]

    def steps(self, switch_id: int) -> list[dict]:
        rows, _ = self.meta.run(
            "SELECT step, attempt, status, started_at, finished_at, detail FROM switch_steps WHERE switch_id = %s "
            "ORDER BY started_at",
            (switch_id,),
        )
        keys = ("step", "attempt", "status", "started_at", "finished_at", "detail")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def history(self, limit: int = 20) -> list[Switch]:
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM switches ORDER BY id DESC LIMIT %s", (limit,))
        return [Switch(*r) for r in rows]

    # -- leases --------------------------------------------------------------
    def acquire_lease(self, holder: str, spans: list[Span], kind: str = "switch") -> None:
        """Hold `spans` for `holder`, or fail naming who holds an overlapping span.

        Taken under the head-row lock that every rules publisher also takes, so two
        preflights cannot both see the ZSIDs free. Idempotent for the same holder.
        """
        with self.meta.transaction() as cur:
            cur.execute("SELECT version FROM head WHERE id = 1 FOR UPDATE")
            cur.execute("SELECT holder, kind, zsid_lo, zsid_hi FROM zsid_leases WHERE holder <> %s", (holder,))
            for other, other_kind, lo, hi in cur.fetchall():
                clash = overlaps(spans, [(int(lo), int(hi))])
                if clash:
                    raise LeaseConflict(
                        f"ZSIDs {format_zsids(clash)} are held by {other_kind} {other}: wait for it to finish, "
                        "or pick other ZSIDs"
                    )
            cur.executemany(
                "INSERT IGNORE INTO zsid_leases (holder, kind, zsid_lo, zsid_hi) VALUES (%s, %s, %s, %s)",
                [(holder, kind, lo, hi) for lo, hi in spans],
            )

    def release_lease(self, holder: str) -> None:
        self.meta.run("DELETE FROM zsid_leases WHERE holder = %s", (holder,))

    def leases(self) -> list[tuple[str, str, int, int]]:
        rows, _ = self.meta.run("SELECT holder, kind, zsid_lo, zsid_hi FROM zsid_leases ORDER BY zsid_lo")
        return [(h, k, int(lo), int(hi)) for h, k, lo, hi in rows]
