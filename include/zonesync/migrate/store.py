"""A migration's durable state in meta (table `migrations`): resume = re-read it.

The run row is made by preflight (one per Airflow run id: a retried preflight finds its
own); one migration of a biz entity at a time. A step writes what it decided (each
version it published, the source's binlog position) once, before acting on it, and
stamps its moments with meta's clock, so a step killed and run again reads its first
decision back. `claim_phase` makes the flip and the rollback exclusive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from zonesync.meta.db import MetaConfig, MetaError
from zonesync.migrate.request import AlreadyMigrating, MigrationRefused, MigrationRequest

RUNNING, SUCCEEDED, FAILED, ROLLED_BACK = "running", "succeeded", "failed", "rolled_back"
ONCE = ("stop_version", "position_json", "flip_version", "lift_version")
STAMPS = ("stop_published_at", "stopped_at", "flipped_at", "lifted_at")


@dataclass
class Migration:
    id: int
    run_id: str
    be_type: str
    be_id: str
    source_zone: str
    target_zone: str
    mode: str
    les_json: str
    reason: str
    actor: str
    status: str
    phase: str
    stop_version: int | None
    stop_published_at: object
    stopped_at: object
    position_json: str | None
    flip_version: int | None
    flipped_at: object
    lift_version: int | None
    lifted_at: object
    detail: str | None
    created_at: object
    updated_at: object
    finished_at: object

    @property
    def les(self) -> list[tuple[str, str]]:
        return [(t, i) for t, i in json.loads(self.les_json)]

    @property
    def entities(self) -> dict[str, list[str]]:
        """The LEs grouped by type: {le_type: [le_id, ...]} (what an entity predicate takes)."""
        grouped: dict[str, list[str]] = {}
        for le_type, le_id in self.les:
            grouped.setdefault(le_type, []).append(le_id)
        return grouped

    @property
    def position(self) -> tuple[str, int] | None:
        return None if self.position_json is None else tuple(json.loads(self.position_json))

    @property
    def window_ms(self) -> float | None:
        """The stop-write window, once lifted: from the stop's publish (a guard may refuse
        the tenant's writes from then on) to the lift's acks (every guard accepts them)."""
        began = self.stop_published_at or self.stopped_at
        if began is None or self.lifted_at is None:
            return None
        return (self.lifted_at - began).total_seconds() * 1000

    def to_doc(self) -> dict:
        """The run as the HTTP API and `zonesync migrations --json` show it."""

        def at(moment) -> str | None:
            return None if moment is None else moment.isoformat()

        return {"run_id": self.run_id, "tenant": self.be_id, "biz_entity_type": self.be_type,
                "from_zone": self.source_zone, "to_zone": self.target_zone, "mode": self.mode, "status": self.status,
                "phase": self.phase, "locating_entities": [{"type": t, "id": i} for t, i in self.les],
                "stop_write_window_ms": self.window_ms, "reason": self.reason, "actor": self.actor,
                "detail": self.detail, "versions": {"stop": self.stop_version, "flip": self.flip_version,
                                                    "lift": self.lift_version},
                "created_at": at(self.created_at), "stop_published_at": at(self.stop_published_at),
                "stopped_at": at(self.stopped_at), "flipped_at": at(self.flipped_at),
                "lifted_at": at(self.lifted_at), "finished_at": at(self.finished_at)}  # fmt: skip


COLUMNS = ", ".join(f.name for f in fields(Migration))


class MigrationStore:
    def __init__(self, meta: MetaConfig):
        self.meta = meta

    def get(self, run_id: str) -> Migration | None:
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM migrations WHERE run_id = %s", (run_id,))
        return Migration(*rows[0]) if rows else None

    def require(self, run_id: str) -> Migration:
        found = self.get(run_id)
        if found is None:
            raise MetaError(f"no migration with run id {run_id!r}: `zonesync migrations` lists them")
        return found

    def history(self, limit: int = 20, be_type: str | None = None, be_id: str | None = None) -> list[Migration]:
        """The newest runs first, of one biz entity when given."""
        where, args = ("WHERE be_type = %s AND be_id = %s", (be_type, be_id)) if be_type else ("", ())
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM migrations {where} ORDER BY id DESC LIMIT %s",
                                (*args, int(limit)))  # fmt: skip
        return [Migration(*row) for row in rows]

    def running(self, be_type: str, be_id: str) -> list[Migration]:
        """The biz entity's runs still running (at most one, by create's lock)."""
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM migrations WHERE be_type = %s AND be_id = %s AND status = %s "
                                "ORDER BY id", (be_type, be_id, RUNNING))  # fmt: skip
        return [Migration(*row) for row in rows]

    def all_running(self) -> list[Migration]:
        """Every run still running, of any biz entity."""
        rows, _ = self.meta.run(f"SELECT {COLUMNS} FROM migrations WHERE status = %s ORDER BY id", (RUNNING,))
        return [Migration(*row) for row in rows]

    def create(self, run_id: str, req: MigrationRequest, source_zone: str, les: list, actor: str) -> Migration:
        """The run's row; refused while another migration of the same biz entity runs.
        Creators take turns (a named lock) and read the running ones with a locking read,
        as the copies do (copy/store.py: no write skew).

        `les` is what preflight read; the biz entity's LEs are enumerated again under the
        head row's lock (S004-31): an LE registered since (in the source: an operator's
        registration before this row exists is not refused) joins the run, one registered
        elsewhere or stopped refuses it, and from this commit on every registration sees the
        run (entities.py `_during_a_run`). So no LE registered before the run is left behind."""
        with self.meta.transaction() as cur:
            cur.execute("SELECT GET_LOCK(CONCAT(DATABASE(), '.migrations.create'), 30)")
            if cur.fetchone()[0] != 1:
                raise MigrationRefused("run_id: another migration is being created this moment; try again")
            cur.execute("SELECT version FROM head WHERE id = 1 FOR UPDATE")  # registrations hold it to their commit
            les = self._enumerated(cur, req, source_zone, les)
            cur.execute(
                "SELECT run_id FROM migrations WHERE be_type = %s AND be_id = %s AND status = %s AND run_id <> %s "
                "FOR UPDATE",
                (req.be_type, req.be_id, RUNNING, run_id),
            )
            other = cur.fetchone()
            if other:
                raise AlreadyMigrating(f"tenant: {req.be_type} {req.be_id} is being migrated already ({other[0]}); "
                                       "wait for it or roll it back")  # fmt: skip
            cur.execute(
                "INSERT IGNORE INTO migrations (run_id, be_type, be_id, source_zone, target_zone, mode, les_json, "
                "reason, actor) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (run_id, req.be_type, req.be_id, source_zone, req.target_zone, req.mode,
                 json.dumps([list(le) for le in les]), req.reason[:500], actor[:128]),
            )  # fmt: skip
        return self.require(run_id)

    @staticmethod
    def _enumerated(cur, req: MigrationRequest, source_zone: str, les: list) -> list:
        """The biz entity's LEs as registered now (head row locked); MigrationRefused when one
        registered since preflight read them is not writable in the source. A request that
        names its LEs (S004-30) moves those only, each still writable in the source."""
        cur.execute("SELECT e.le_type, e.le_id, z.name, e.stop_write FROM locating_entities e JOIN zones z ON "
                    "z.zone_id = e.unit_zone WHERE e.be_type = %s AND e.be_id = %s ORDER BY e.le_type, e.le_id",
                    (req.be_type, req.be_id))  # fmt: skip
        now = cur.fetchall()
        if req.les:
            named = {tuple(le) for le in les}
            apart = [f"{t} {i} ({z}{', stopped' if sw else ''})" for t, i, z, sw in now
                     if (t, i) in named and (z != source_zone or sw)]  # fmt: skip
            if apart or len(named & {(t, i) for t, i, _, _ in now}) != len(named):
                raise MigrationRefused(f"les: changed while preflight ran: {', '.join(apart) or 'one unregistered'} "
                                       f"not writable in {source_zone}; try again")  # fmt: skip
            return les
        if {(t, i) for t, i, _, _ in now} == {tuple(le) for le in les}:
            return les
        apart = [f"{t} {i} ({z}{', stopped' if sw else ''})" for t, i, z, sw in now if z != source_zone or sw]
        if apart:
            raise MigrationRefused(f"tenant: {req.be_type} {req.be_id}'s locating entities changed while preflight "
                                   f"ran: {', '.join(apart)} not writable in {source_zone}; try again")  # fmt: skip
        return [(t, i) for t, i, _, _ in now]

    def set_once(self, run_id: str, **values) -> Migration:
        """Store each value unless one is there already; the row as stored."""
        unknown = set(values) - set(ONCE)
        if unknown:
            raise ValueError(f"not a write-once migration field: {sorted(unknown)}")
        sets = ", ".join(f"{k} = COALESCE({k}, %s)" for k in values)
        encoded = [json.dumps(v) if k.endswith("_json") else v for k, v in values.items()]
        self.meta.run(f"UPDATE migrations SET {sets} WHERE run_id = %s", (*encoded, run_id))
        return self.require(run_id)

    def stamp_once(self, run_id: str, field: str) -> Migration:
        """A moment, on meta's clock, once."""
        if field not in STAMPS:
            raise ValueError(f"not a migration time field: {field}")
        self.meta.run(f"UPDATE migrations SET {field} = COALESCE({field}, NOW(6)) WHERE run_id = %s", (run_id,))
        return self.require(run_id)

    def phase(self, run_id: str, phase: str) -> None:
        self.meta.run("UPDATE migrations SET phase = %s WHERE run_id = %s AND phase NOT IN ('flipping', "
                      "'lifted', 'rolling_back')", (phase, run_id))  # fmt: skip

    def claim_phase(self, run_id: str, phase: str) -> bool:
        """Enter 'flipping' or 'rolling_back', unless the other was entered first: the point
        of no return as one conditional update."""
        other = {"flipping": "rolling_back", "rolling_back": "flipping"}[phase]
        self.meta.run("UPDATE migrations SET phase = %s WHERE run_id = %s AND phase NOT IN (%s, 'lifted')",
                      (phase, run_id, other))  # fmt: skip
        return self.require(run_id).phase in (phase, "lifted" if phase == "flipping" else phase)

    def finish(self, run_id: str, status: str, detail: str = "", phase: str | None = None) -> None:
        sets = ", phase = %s" if phase else ""
        self.meta.run(f"UPDATE migrations SET status = %s, detail = %s, finished_at = NOW(6){sets} WHERE run_id = %s",
                      (status, detail[:60000], *([phase] if phase else []), run_id))  # fmt: skip

    def publishing(self, run_id: str, phases: tuple[str, ...], record: str | None = None, stamp: str | None = None):
        """The hook a migration's publish runs in its version's transaction
        (EntityRegistry.register_biz `within`): the run's row locked; still running in one
        of `phases`, else nothing is published (MigrationRefused); `record` (a write-once
        field) set to the version in the same commit, `stamp` to meta's clock. So a publish and its record land
        together, and a rollback's claim (claim_phase, which waits for the row) sees either
        both or neither: a stop-write never lands after the rollback decided."""
        if record is not None and record not in ONCE:
            raise ValueError(f"not a write-once migration field: {record}")
        if stamp is not None and stamp not in STAMPS:
            raise ValueError(f"not a migration time field: {stamp}")

        def within(cur, version: int) -> None:
            cur.execute("SELECT status, phase FROM migrations WHERE run_id = %s FOR UPDATE", (run_id,))
            row = cur.fetchone()
            if row is None or row[0] != RUNNING or row[1] not in phases:
                state = "missing" if row is None else f"{row[0]} ({row[1]})"
                raise MigrationRefused(f"migration {run_id} is {state}: nothing published")
            if record is not None:
                cur.execute(f"UPDATE migrations SET {record} = COALESCE({record}, %s) WHERE run_id = %s",
                            (version, run_id))  # fmt: skip
            if stamp is not None:
                cur.execute(f"UPDATE migrations SET {stamp} = COALESCE({stamp}, NOW(6)) WHERE run_id = %s", (run_id,))

        return within

    def note_failure(self, run_id: str, step: str, text: str) -> None:
        """Why a step failed for good, kept in `detail` while the run is still running (the
        rollback reports it)."""
        said = text if text.startswith(f"{step}:") else f"{step}: {text}"
        self.meta.run("UPDATE migrations SET detail = %s WHERE run_id = %s AND status = %s",
                      (said[:60000], run_id, RUNNING))  # fmt: skip

    def ms_since_stopped(self, run_id: str) -> float:
        """Milliseconds since the stop-write's acks, on meta's clock (0 before them)."""
        rows, _ = self.meta.run(
            "SELECT TIMESTAMPDIFF(MICROSECOND, stopped_at, NOW(6)) / 1000 FROM migrations WHERE run_id = %s", (run_id,)
        )
        return float(rows[0][0]) if rows and rows[0][0] is not None else 0.0
