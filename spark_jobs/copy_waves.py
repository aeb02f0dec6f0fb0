"""The full copy job's waves (spark_jobs/full_copy.py): where their chunks come from
while the plan is still being made, and (tests) a gate between a wave's read and its
landing."""

from __future__ import annotations

import hashlib
import threading
import time

from spark_jobs.common import db_connect


class Planner:
    """A table's chunks: those stored by an earlier attempt, and, until the plan reaches
    +inf, the rest planned on a thread of its own by `extend(stored, found)` (each chunk
    stored as found, then handed to `found`) while the first waves run: planning a
    10M-row table walks 10M keys, about 2 s here. `pending(chunk)` says which stored
    chunks still need work. The full copy's and the consistency check's jobs share it."""

    def __init__(self, table: str, stored: list[dict], complete: bool, extend, pending, log=print):
        self.table, self.log, self.pending = table, log, pending
        self.chunks, self.next = list(stored), 0
        self.cond = threading.Condition()
        self.failed: BaseException | None = None
        self.finished = complete
        self.thread = None
        if not complete:
            self.thread = threading.Thread(target=self._plan, args=(extend, stored), name="planner", daemon=True)
            self.thread.start()

    def _plan(self, extend, stored: list[dict]) -> None:
        began = time.monotonic()
        try:
            extend(stored, self._found)
            self.log(f"{self.table}: {len(self.chunks)} chunks planned in {time.monotonic() - began:.1f} s")
        except BaseException as exc:  # noqa: BLE001 - raised in the driver by next_wave
            self.failed = exc
        finally:
            with self.cond:
                self.finished = True
                self.cond.notify_all()

    def _found(self, chunk: dict) -> None:
        with self.cond:
            self.chunks.append(chunk)
            self.cond.notify_all()

    def next_wave(self, size: int) -> list[dict]:
        """Up to `size` chunks not done yet, in order, waiting for the planner to find them;
        fewer only at the plan's end."""
        wave: list[dict] = []
        with self.cond:
            while len(wave) < size:
                while self.next >= len(self.chunks) and not self.finished:
                    self.cond.wait(1.0)
                if self.failed is not None:
                    raise self.failed
                if self.next >= len(self.chunks):
                    break
                chunk = self.chunks[self.next]
                self.next += 1
                if self.pending(chunk):
                    wave.append(chunk)
        return wave

    def close(self) -> None:
        if self.thread is not None:
            self.thread.join()


def copy_planner(src: tuple[str, dict], dst: tuple[str, dict], run_id: str, table: str, key: list[str],
                 chunk_rows: int, stored: list[dict], log=print, where: str | None = None) -> Planner:  # fmt: skip
    """The full copy's plan: over the source's keys (`where`: the keys of the rows it
    selects), kept in the target's copy_chunks (zonesync.copy.chunks.extend_plan); a chunk
    not done is pending."""
    from zonesync.copy import chunks as chunk_plan

    def extend(stored: list[dict], found) -> None:
        source, target = db_connect(*src), db_connect(*dst)
        try:
            chunk_plan.extend_plan(target, source, run_id, table, key, chunk_rows, stored, found=found, where=where)
        finally:
            source.close()
            target.close()

    return Planner(table, stored, chunk_plan.complete(stored), extend, lambda c: c["status"] != "done", log)


class Gate:
    """(tests) A named lock in the target that each chunk's task takes after reading its
    rows and before landing them: held by the driver while the test's hook runs."""

    def __init__(self, url: str, props: dict, run_id: str):
        self.name = "zonesync-copy-gate-" + hashlib.sha1(run_id.encode()).hexdigest()[:12]
        self.sql = f"SELECT GET_LOCK('{self.name}', 600), RELEASE_LOCK('{self.name}')"
        self.conn = db_connect(url, props)

    def __enter__(self):
        with self.conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 10)", (self.name,))
            assert cur.fetchone()[0] == 1, "the copy's test gate is held elsewhere"
        return self

    def run(self, copy, hook) -> None:
        """copy() in a thread; once a task waits at the gate, hook(); then open the gate."""
        failed: list[BaseException] = []

        def body() -> None:
            try:
                copy()
            except BaseException as exc:  # noqa: BLE001 - raised in the driver below
                failed.append(exc)

        worker = threading.Thread(target=body, name="copy-wave")
        worker.start()
        try:
            while worker.is_alive() and not self._waited():
                time.sleep(0.05)
            if worker.is_alive():
                hook()
        finally:
            with self.conn.cursor() as cur:
                cur.execute("SELECT RELEASE_LOCK(%s)", (self.name,))
            worker.join()
        if failed:
            raise failed[0]

    def _waited(self) -> bool:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s",
                (f"SELECT GET_LOCK('{self.name}'%",),
            )
            return cur.fetchone()[0] > 0

    def __exit__(self, *exc) -> None:
        self.conn.close()
