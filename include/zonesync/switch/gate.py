"""Gates: a step inside the write-blocked window waits for its predecessor's stamp.

The window of a switch runs from the BLOCK push to the ACTIVE acks, and the
steps inside it (reshard, sync_position/wait_sync, activate) take tens of
milliseconds each. Starting each one only after the previous one finished
costs a whole task start per step on an orchestrator such as Airflow (a second
or more on a busy machine), three of them inside the window. So the DAG starts
those tasks together with block, and each one first waits here for the stamp
its predecessor writes in the switch row when it is done:

    reshard        waits for block_acked_at   (every instance acked BLOCK)
    sync_position  waits for resharding_at    (T: every instance acked RESHARDING)
    activate       waits for synced_at        (every zone applied up to P)

The stamps are the protocol's own preconditions, checked again by each step, so
starting early never lets a step act before its predecessor is complete: the
gate only moves the waiting from the scheduler into the step. Safety does not
rest on the ordering at all (publishes are compare-and-swap on the rules
version; activate and rollback claim the phase exclusively).

Failure cases the gate handles:
- the predecessor failed for good, or the switch was rolled back or ended:
  GateClosed, the step must not run (its task is skipped, activate's fails so
  the run ends failed);
- the predecessor has not started (not scheduled yet, or waiting for a worker
  slot, or an orchestrator that runs ready tasks one at a time, like Airflow's
  dag.test()): GateNotReady, so the caller frees its worker and comes back
  later instead of holding a slot the predecessor may need;
- the predecessor crashed and is being retried, or defers: keep waiting, the
  stamp is written by whichever attempt completes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pymysql

from zonesync.meta.db import MetaError
from zonesync.switch.store import RUNNING, SwitchStore


@dataclass(frozen=True)
class Gate:
    stamp: str  # what the predecessor writes in the switch row when it is done
    task: str  # the task this gate belongs to
    predecessor: str  # the predecessor's task
    records: tuple[str, ...]  # the predecessor's step records in switch_steps


# step -> its gate. The wait_sync sensor records two steps: P (sync_position), then the wait.
GATES: dict[str, Gate] = {
    "reshard": Gate("block_acked_at", "reshard", "block", ("block",)),
    "sync_position": Gate("resharding_at", "wait_sync", "reshard", ("reshard",)),
    "activate": Gate("synced_at", "activate", "wait_sync", ("sync_position", "wait_sync")),
}

# Predecessor task states (Airflow's names) in which it will never write the stamp now.
ENDED = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})
# ... and those in which it is not running and may be waiting for the slot we hold.
NOT_STARTED = frozenset({None, "none", "scheduled", "up_for_reschedule"})


class GateClosed(Exception):
    """The predecessor ended without its stamp, or the switch ended: this step must not run."""


class GateNotReady(Exception):
    """The predecessor has not started (or waits long, deferred): come back later rather than hold a worker."""

    def __init__(self, message: str, retry_in_s: float = 1.0):
        super().__init__(message)
        self.retry_in_s = retry_in_s


class _Poller:
    """The gate's reads on one meta connection, kept open while it waits.

    A connection per read (MetaConfig.run) would cost the meta store about a
    hundred connects a second per waiting task, on the same cores as the zones
    and the replication that the wait_sync step is waiting for.
    """

    def __init__(self, store: SwitchStore, run_id: str, step: str):
        self.store, self.run_id, self.step, self.gate = store, run_id, step, GATES[step]
        self.conn = None
        self.switch_id: int | None = None

    def _query(self, sql: str, args) -> list[tuple]:
        for attempt in (1, 2):  # one reconnect: the meta store restarted, a connection timed out
            try:
                if self.conn is None:
                    self.conn = self.store.meta.connect()
                with self.conn.cursor() as cur:
                    cur.execute(sql, args)
                    return list(cur.fetchall())
            except (pymysql.err.OperationalError, MetaError):
                self.close()
                if attempt == 2:
                    raise
        return []

    def stamped(self) -> bool:
        """Is the stamp there? GateClosed if the switch ended or a rollback claimed it: that wins over a stamp."""
        rows = self._query(
            f"SELECT {self.gate.stamp} IS NOT NULL, status, phase, id FROM switches WHERE run_id = %s", (self.run_id,)
        )
        if not rows:
            raise GateClosed(f"no switch {self.run_id}: preflight did not run")
        stamped, status, phase, self.switch_id = rows[0]
        if status != RUNNING or phase == "rolling_back":
            raise GateClosed(
                f"{self.step} not run: the switch is {status} ({phase}); {self.gate.predecessor} did not complete"
            )
        return bool(stamped)

    def enter(self) -> None:
        self._query(
            "INSERT INTO switch_gates (switch_id, task) VALUES (%s, %s) ON DUPLICATE KEY UPDATE "
            "entered_at = NOW(6), passed_at = NULL, left_at = NULL",
            (self.switch_id, self.gate.task),
        )

    def leave(self, passed: bool) -> None:
        column = "passed_at" if passed else "left_at"
        self._query(
            f"UPDATE switch_gates SET {column} = NOW(6) WHERE switch_id = %s AND task = %s",
            (self.switch_id, self.gate.task),
        )

    def predecessor(self) -> tuple[bool, tuple | None]:
        """(has it started: at its gate or past it, its last failed attempt if a step record of it says failed)."""
        at_gate = self._query(
            "SELECT 1 FROM switch_gates WHERE switch_id = %s AND task = %s AND left_at IS NULL",
            (self.switch_id, self.gate.predecessor),
        )
        records = self.gate.records
        marks = ", ".join(["%s"] * len(records))
        rows = self._query(
            f"SELECT step, status, attempt, finished_at FROM switch_steps WHERE switch_id = %s AND step IN ({marks})",
            (self.switch_id, *records),
        )
        failed = next((tuple(r) for r in rows if r[1] == "failed"), None)
        return bool(at_gate or rows), failed

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass
            self.conn = None


def wait_gate(
    store: SwitchStore,
    run_id: str,
    step: str,
    predecessor_state: Callable[[], str | None],
    poll_s: float = 0.01,
    grace_s: float = 3.0,
    state_every_s: float = 10.0,
) -> float:
    """Return once the predecessor's stamp is in the switch row; the seconds waited.

    The wait reads the meta store, every `poll_s`: the stamp, the switch's
    status and phase, and whether the predecessor has started (it is at its own
    gate, or its step has a record). The orchestrator is asked for the
    predecessor's task state only when meta cannot tell: when the predecessor
    has not started after `grace_s` (waiting for a worker slot? or dag.test(),
    which runs one task at a time?), when its step record shows a failed attempt
    (final, or retried?), and every `state_every_s` as a backstop. Under load one
    such call can take seconds (Airflow's API server stalls now and then), so
    none is made while a predecessor that started runs normally to its stamp.
    """
    if step not in GATES:
        return 0.0
    stamp, predecessor = GATES[step].stamp, GATES[step].predecessor
    poller = _Poller(store, run_id, step)
    started = time.monotonic()
    next_check, next_look, failed_seen, present, passed = started + grace_s, started, None, False, False
    entered, failed_now = False, None
    try:
        while True:
            if poller.stamped():
                passed = True
                return time.monotonic() - started
            if not entered:
                poller.enter()  # tells our own successor we have started
                entered = True
            now = time.monotonic()
            if now >= next_look:
                was_present = present
                present, failed_now = poller.predecessor()
                if present and not was_present:
                    next_check = max(next_check, now + state_every_s)  # started: meta tells the rest
                elif was_present and not present:  # it left its gate without passing: rescheduled?
                    next_check = min(next_check, now + grace_s)
                if failed_now and failed_now != failed_seen:  # a failed attempt: final? ask now, once per attempt
                    failed_seen, next_check = failed_now, now
                next_look = now + 0.1
            if now >= next_check:
                state = predecessor_state()
                if poller.stamped():  # stamped, then ended, while we asked
                    passed = True
                    return time.monotonic() - started
                if state in ENDED:
                    raise GateClosed(f"{step} not run: {predecessor} ended {state} without {stamp}")
                if state in NOT_STARTED:
                    raise GateNotReady(f"{step} waits for {predecessor}, which has not started ({state})")
                if state == "deferred":  # a long wait (wait_sync past its time in the worker): free the slot
                    raise GateNotReady(f"{step} waits for {predecessor}, which is deferred", retry_in_s=5.0)
                # the step record said failed but the task is not over yet: final or retried? ask again soon
                soon = failed_now is not None and state in ("running", "queued")
                next_check = time.monotonic() + (state_every_s if present and not soon else grace_s)
            time.sleep(poll_s)
    finally:
        if poller.switch_id is not None:
            try:
                poller.leave(passed)
            except Exception:  # noqa: BLE001 - a stale row only makes a successor ask the orchestrator later
                pass
        poller.close()
