"""The write-unavailability window of a zone switch, through the real Airflow scheduler.

A full local stack (zones, replication workers, Airflow) in its own state dir.
Writers push ~1,000 guarded writes/s: half to tenants whose ZSIDs move, half to
tenants that stay. SWITCHES switches of ZSIDs 0-99 go back and forth between
zones a and b, each triggered through the REST API as `zonesync switch` does.
The window of a switch is from the last write from_zone accepted for a moved
ZSID to the first one to_zone accepted, as the writers saw them. p50 and p99;
one warm-up switch runs first and is not counted.
Target: p99 <= 2 s (Vitess SwitchTraffic users report ~10 s of buffered writes).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

from bench.harness import BenchEnv, Row
from zonesync.dal import Guard, ZoneDB, ZoneReshardingBlocked
from zonesync.dal.errors import WrongZone
from zonesync.dev import env as dev_env
from zonesync.dev.stack import full_stack
from zonesync.switch.store import SwitchStore

SWITCHES = int(os.environ.get("ZONESYNC_BENCH_SWITCHES", 10))
RATE = int(os.environ.get("ZONESYNC_BENCH_SWITCH_RATE", 1000))
THREADS = 12  # fewer fall short of the 1,000 writes/s asked on this machine (4: ~800, 8: ~850)
MOVED = range(0, 100)  # tenant_id = ZSID under examples/rules.yaml (modulo 1024)
STAYING = {"a": range(200, 300), "b": range(500, 600)}
WINDOW_TASKS = ("block", "reshard", "wait_sync", "activate")


class Load:
    def __init__(self, guards: dict[str, Guard]):
        self.guards = guards
        self.accepted: list[tuple[str, int, float, float]] = []  # zone, tenant, started, committed
        self.refused_staying = 0
        self.attempts = [0] * THREADS  # per writer thread: writes asked for (a refused one retried elsewhere: one)
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def _write(self, zone: str, tenant: int) -> bool:
        started = time.monotonic()
        try:
            with self.guards[zone].transaction() as tx:
                if not tx.update("tenants", {"tenant_id": tenant}, {"name": f"{zone}-{started:.6f}"}):
                    tx.insert("tenants", {"tenant_id": tenant, "name": f"{zone}-new"})
        except (ZoneReshardingBlocked, WrongZone):
            if tenant not in MOVED:
                self.refused_staying += 1
            return False
        except Exception:  # noqa: BLE001 - racing replication of the same row, a deadlock: not accepted
            return False
        with self.lock:
            self.accepted.append((zone, tenant, started, time.monotonic()))
        return True

    def _loop(self, n: int) -> None:
        period = THREADS / RATE
        next_due = time.monotonic()
        i = n
        while not self.stop.is_set():
            i += THREADS
            self.attempts[n] += 1
            if i % 2:
                tenant = MOVED[i % len(MOVED)]
                if not self._write("a", tenant):
                    self._write("b", tenant)
            else:
                zone = "a" if i % 4 == 0 else "b"
                self._write(zone, STAYING[zone][i % 100])
            next_due += period
            delay = next_due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_due = time.monotonic()  # behind: do not burst

    def start(self):
        self.threads = [threading.Thread(target=self._loop, args=(n,), daemon=True) for n in range(THREADS)]
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def window(self, since: float, src: str, dst: str) -> float | None:
        with self.lock:
            moved = [w for w in self.accepted if w[1] in MOVED and w[3] >= since]
        first_dst = min((w[2] for w in moved if w[0] == dst), default=None)
        if first_dst is None:
            return None
        last_src = max((w[3] for w in moved if w[0] == src and w[3] <= first_dst), default=since)
        return first_dst - last_src


def _timeline(meta, run_id: str) -> str:
    """Each step's own time and the scheduler's gap before it, from block on (where the window starts)."""
    store = SwitchStore(meta)
    steps = store.steps(store.require(run_id).id)
    out, prev_end = [], None
    for s in steps:
        if s["step"] in ("preflight", "record_state", "verify") or s["finished_at"] is None:
            prev_end = s["finished_at"]
            continue
        gap = (s["started_at"] - prev_end).total_seconds() if prev_end else 0.0
        took = (s["finished_at"] - s["started_at"]).total_seconds()
        detail = s["detail"] or ""
        note = f" [{detail.split('(')[1].split(';')[0]}]" if s["step"] == "wait_sync" and "capture" in detail else ""
        out.append(f"+{gap:.2f} {s['step']} {took:.2f}{note}")
        prev_end = s["finished_at"]
    return " | ".join(out)


def _task_starts(api, run_id: str) -> str:
    """When Airflow started each gated task, relative to block: they should start together."""
    from datetime import datetime

    tis = {ti["task_id"]: ti for ti in api.task_instances("zone_switch", run_id)}
    started = {
        t: datetime.fromisoformat(tis[t]["start_date"]) for t in WINDOW_TASKS if tis.get(t, {}).get("start_date")
    }
    if "block" not in started:
        return ""
    return "task starts " + " ".join(
        f"{t}{(started[t] - started['block']).total_seconds():+.2f}" for t in WINDOW_TASKS[1:] if t in started
    )


def run(env: BenchEnv) -> list[Row]:
    root = Path(env.cfg.state_dir) / "switch-stack"
    with full_stack(root) as (cfg, _, api):
        meta = dev_env.meta_config(cfg)
        zone_port = {z.name: z.port for z in cfg.zones}
        guards = {
            z: Guard(meta, z, ZoneDB("127.0.0.1", zone_port[z], "root", "", "zonesync_app"), period=1.0).start()
            for z in ("a", "b")
        }
        # The writers stand for the application, which runs on its own machines in production;
        # here they share 2 cores with the zones and Airflow, so they yield the CPU first.
        os.nice(int(os.environ.get("ZONESYNC_BENCH_WRITER_NICE", 10)))
        load = Load(guards)
        load_started = time.monotonic()
        load.start()
        try:
            time.sleep(3)
            windows, durations = [], []
            for n in range(SWITCHES + 1):  # the first warms Airflow up (first run, imports): not counted
                src, dst = ("a", "b") if n % 2 == 0 else ("b", "a")
                conf = {"zsids": f"{MOVED.start}-{MOVED.stop - 1}", "from_zone": src, "to_zone": dst,
                        "reason": f"bench switch {n}", "lag_threshold_s": 30}  # fmt: skip
                started = time.monotonic()
                run_id = api.trigger("zone_switch", conf)["dag_run_id"]
                state = api.follow("zone_switch", run_id, timeout=300)
                durations.append(time.monotonic() - started)
                if state != "success":
                    raise RuntimeError(f"switch {n} ({run_id}) ended {state}: see `zonesync switch status {run_id}`")
                time.sleep(1.0)  # let the new owner's first writes land
                w = load.window(started, src, dst)
                if w is None:
                    raise RuntimeError(f"switch {n}: zone {dst} accepted no moved write after it")
                if n > 0:
                    windows.append(w)
                timeline = f"{_timeline(meta, run_id)}; {_task_starts(api, run_id)}"
                print(f"switch {n} {src}->{dst}: window {w * 1000:.0f} ms, run {durations[-1]:.1f} s; {timeline}")
            elapsed = time.monotonic() - load_started
        finally:
            load.finish()
            for g in guards.values():
                g.close()
    windows.sort()
    p50 = statistics.median(windows)
    p99 = windows[max(0, int(len(windows) * 0.99) - 1)] if len(windows) >= 100 else windows[-1]
    rate = len(load.accepted) / max(elapsed, 1e-6)
    asked = sum(load.attempts) / max(elapsed, 1e-6)
    print(
        f"switch window over {len(windows)} switches at ~{asked:.0f} writes/s asked, ~{rate:.0f} accepted "
        f"(moved ZSIDs are refused inside windows): p50 {p50 * 1000:.0f} ms, "
        f"p99 (max of {len(windows)}) {p99 * 1000:.0f} ms; switch runs p50 {statistics.median(durations):.1f} s; "
        f"writes to staying ZSIDs refused: {load.refused_staying}"
    )
    return [
        Row(
            "switch window p99 budget: 2 s / p99",
            2.0 / max(p99, 1e-3),
            1.0,
            "x",
            1.0,
            f"the 2 s target (window p99 {p99 * 1000:.0f} ms, p50 {p50 * 1000:.0f} ms over {len(windows)} switches)",
        )
    ]
