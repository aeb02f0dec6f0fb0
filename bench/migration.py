"""The stop-write window of a tenant's migration, through the real Airflow scheduler.

A full local stack (zones, replication workers, Airflow) in its own state dir. Tenant 7
(ZSID 7: zone a under examples/rules.yaml) is registered in a with ROWS notes (100k;
ZONESYNC_BENCH_MIGRATION_ROWS) in a resident table (rows only in the tenant's zone,
moved by the migration's stock copy and stream: docs/migration.md). Its application
writes ~RATE (200) notes/s through the guards: each write goes to the zone that accepts
it (a, else b). MIGRATIONS plan1 migrations of tenant 7 go back and forth between a and
b, each triggered through the REST API as `zonesync migrate` does (the le_migration DAG:
admit, the stock copy and verify while the tenant is written, the gate, then the cutover
task, release). The window of a migration is from the last write the source accepted to
the first one the target accepted, as the writers saw them; the run's own record (stop
publish to lift acks) is printed beside it. p50 and p99; one warm-up migration runs
first and is not counted. Target: p99 <= 2 s (moonshot 1 s).

Then PLAN2_RUNS plan2 migrations of the same tenant (stop-write first, then the copy):
their whole time against plan1's (p50s; the issue's ratio) and their window, printed.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

from bench.harness import BenchEnv, Row
from zonesync.dal import EntityWriteStopped, Guard, ZoneDB
from zonesync.dal.errors import WrongZone
from zonesync.dev import env as dev_env
from zonesync.dev.stack import full_stack
from zonesync.meta.entities import EntityRegistry
from zonesync.meta.guards import wait_acks
from zonesync.migrate.store import MigrationStore

MIGRATIONS = int(os.environ.get("ZONESYNC_BENCH_MIGRATIONS", 10))
PLAN2_RUNS = int(os.environ.get("ZONESYNC_BENCH_MIGRATION_PLAN2_RUNS", 2))
ROWS = int(os.environ.get("ZONESYNC_BENCH_MIGRATION_ROWS", 100_000))
RATE = int(os.environ.get("ZONESYNC_BENCH_MIGRATION_RATE", 200))
TENANT = 7
THREADS = 4
BATCH = 1000


class Load:
    """The tenant's application: THREADS writers at RATE inserts/s in all, each insert to
    the zone that accepts it; accepted ones kept as (zone, started, committed)."""

    def __init__(self, guards: dict[str, Guard], first_id: int):
        self.guards = guards
        self.accepted: list[tuple[str, float, float]] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.next_id = first_id

    def _insert(self, zone: str) -> bool:
        with self.lock:
            self.next_id += 1
            order_id = self.next_id
        started = time.monotonic()
        try:
            with self.guards[zone].transaction() as tx:
                tx.insert("notes", {"note_id": order_id, "tenant_id": TENANT, "body": "live"})
        except (WrongZone, EntityWriteStopped):
            return False
        with self.lock:
            self.accepted.append((zone, started, time.monotonic()))
        return True

    def _loop(self) -> None:
        period = THREADS / RATE
        next_due = time.monotonic()
        while not self.stop.is_set():
            if not self._insert("a"):
                self._insert("b")
            next_due += period
            delay = next_due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_due = time.monotonic()

    def start(self):
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(THREADS)]
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def window(self, since: float, src: str, dst: str) -> float | None:
        with self.lock:
            seen = [w for w in self.accepted if w[2] >= since]
        first_dst = min((w[1] for w in seen if w[0] == dst), default=None)
        if first_dst is None:
            return None
        last_src = max((w[2] for w in seen if w[0] == src and w[2] <= first_dst), default=since)
        return first_dst - last_src


NOTES_DDL = (
    "CREATE TABLE IF NOT EXISTS notes (note_id BIGINT NOT NULL PRIMARY KEY, tenant_id BIGINT NOT NULL, "
    "body VARCHAR(64) NOT NULL, _zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0, "
    "KEY idx_notes_tenant (tenant_id)) ENGINE=InnoDB"
)


def _resident_notes(cfg, meta) -> None:
    """`notes` in every zone and resident in the rules (examples/rules.yaml plus it)."""
    from zonesync.meta.store import MetaStore
    from zonesync.rules import parse

    for z in cfg.zones:
        conn = ZoneDB("127.0.0.1", z.port, "root", "", "zonesync_app").connect()
        try:
            with conn.cursor() as cur:
                cur.execute(NOTES_DDL)
            conn.commit()
        finally:
            conn.close()
    store = MetaStore(meta)
    doc = store.rules_at()[1].to_doc()
    doc["tables"]["notes"] = {"column": "tenant_id", "function": "modulo", "buckets": 1024,
                              "entity": {"type": "tenant", "column": "tenant_id"}, "resident": True}  # fmt: skip
    store.publish_rules(parse(doc, "bench rules"), "bench: notes resident")
    time.sleep(3)  # the appliers take the newest rules once a second


def _load_rows(guard: Guard) -> None:
    for lo in range(0, ROWS, BATCH):
        with guard.transaction() as tx:
            for n in range(lo, min(ROWS, lo + BATCH)):
                tx.insert("notes", {"note_id": 10_000_000 + n, "tenant_id": TENANT, "body": f"note {n}"})


def _migrate(api, meta, load: Load, n: int, src: str, dst: str, mode: str) -> tuple[float, float, float]:
    """(window as the writers saw it, window recorded, whole time), in seconds. plan2 runs
    without a size limit: the tenant grows by RATE rows/s through the bench."""
    conf = {"tenant": str(TENANT), "to_zone": dst, "reason": f"bench migration {n} ({mode})", "mode": mode,
            "plan2_max_rows": 100_000_000}  # fmt: skip
    began = time.monotonic()
    run_id = api.trigger("le_migration", conf)["dag_run_id"]
    state = api.follow("le_migration", run_id, timeout=900)
    whole = time.monotonic() - began
    if state != "success":
        raise RuntimeError(f"migration {n} ({run_id}) ended {state}: `zonesync migrate status {run_id}`")
    time.sleep(1.0)  # let the target's first writes land
    w = load.window(began, src, dst)
    if w is None:
        raise RuntimeError(f"migration {n}: zone {dst} accepted no write of tenant {TENANT} after it")
    mig = MigrationStore(meta).require(run_id)
    print(f"migration {n} {src}->{dst} ({mode}): window {w * 1000:.0f} ms as the writers saw it, "
          f"{mig.window_ms:.0f} ms recorded; run {whole:.1f} s")  # fmt: skip
    return w, mig.window_ms / 1000, whole


def run(env: BenchEnv) -> list[Row]:
    root = Path(env.cfg.state_dir) / "migration-stack"
    with full_stack(root, dags=("le_migration",)) as (cfg, _, api):
        meta = dev_env.meta_config(cfg)
        zone_port = {z.name: z.port for z in cfg.zones}
        _resident_notes(cfg, meta)
        guards = {z: Guard(meta, z, ZoneDB("127.0.0.1", zone_port[z], "root", "", "zonesync_app"), period=1.0).start()
                  for z in ("a", "b")}  # fmt: skip
        version = EntityRegistry(meta).register_biz("tenant", str(TENANT), "a", [("tenant", str(TENANT))],
                                                    "bench: tenant 7")  # fmt: skip
        wait_acks(meta, version, {"a", "b"}, 30)  # a resident row needs its entity registered where it is written
        started = time.monotonic()
        _load_rows(guards["a"])
        print(f"tenant {TENANT}: {ROWS} resident notes written in a in {time.monotonic() - started:.0f} s")
        os.nice(int(os.environ.get("ZONESYNC_BENCH_WRITER_NICE", 10)))  # the application runs elsewhere in production
        load = Load(guards, 20_000_000)
        load.start()
        try:
            time.sleep(3)
            windows, recorded, durations, plan2 = [], [], [], []
            for n in range(MIGRATIONS + 1 + PLAN2_RUNS):  # the first warms Airflow up: not counted
                src, dst = ("a", "b") if n % 2 == 0 else ("b", "a")
                mode = "plan1" if n <= MIGRATIONS else "plan2"
                w, rec, whole = _migrate(api, meta, load, n, src, dst, mode)
                if mode == "plan2":
                    plan2.append((w, whole))
                elif n > 0:
                    windows.append(w)
                    recorded.append(rec)
                    durations.append(whole)
        finally:
            load.finish()
            for g in guards.values():
                g.close()
    windows.sort()
    recorded.sort()
    p50, p99 = statistics.median(windows), windows[-1]  # max of 10: the p99 of so few runs
    print(f"migration stop-write window over {len(windows)} migrations of {ROWS} rows at ~{RATE} writes/s: "
          f"p50 {p50 * 1000:.0f} ms, p99 (max) {p99 * 1000:.0f} ms as the writers saw it; recorded p50 "
          f"{statistics.median(recorded) * 1000:.0f} ms, max {recorded[-1] * 1000:.0f} ms; whole migration p50 "
          f"{statistics.median(durations):.1f} s")  # fmt: skip
    rows = [
        Row("migration window p99 budget: 2 s / p99", 2.0 / max(p99, 1e-3), 1.0, "x", 1.0,
            f"the 2 s target (window p99 {p99 * 1000:.0f} ms, p50 {p50 * 1000:.0f} ms over {len(windows)} "
            f"migrations)"),
    ]  # fmt: skip
    if plan2:
        whole1, whole2 = statistics.median(durations), statistics.median(t for _, t in plan2)
        window2 = statistics.median(w for w, _ in plan2)
        print(f"plan2 over {len(plan2)} migrations: whole p50 {whole2:.1f} s (plan1 {whole1:.1f} s: "
              f"{whole2 / whole1:.2f}x), window p50 {window2:.1f} s (plan1 {p50:.2f} s)")  # fmt: skip
        rows.append(Row("migration whole time, plan2 / plan1 (printed)", whole2, whole1, "x", 0.0,
                        f"plan1's whole migration (plan2's window p50 {window2:.1f} s: the copy is inside it)",
                        judged=False))  # fmt: skip
    return rows
