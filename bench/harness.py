"""A private environment for benchmarks and the result table."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from zonesync import config
from zonesync.dev import env as dev_env
from zonesync.dev import procs


@dataclass
class Row:
    name: str
    value: float
    baseline: float
    unit: str
    target: float  # required value/baseline ratio (higher is better)
    baseline_name: str
    judged: bool = True  # False: printed for reference beside a judged row of the same suite

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("inf")

    @property
    def met(self) -> bool:
        return not self.judged or self.ratio >= self.target


# Every table a bench replicates, declared in the rules its appliers check each event
# against (apply/loop/owner_history.py): the sample's tables and the benches' own, the
# zone split of examples/rules.yaml (a 0-399, b 400-799, c 800-1023).
_ALL_IN_A = {"column": "id", "function": "range", "ranges": [{"lo": 0, "hi": 2**62, "zsid": 0}]}
BENCH_RULES = {
    "zsid_space": {"min": 0, "max": 1023},
    "txn_deadline_ms": 2000,
    "rules": [{"zsids": "0-399", "zone": "a"}, {"zsids": "400-799", "zone": "b"}, {"zsids": "800-1023", "zone": "c"}],
    "tables": {
        "tenants": {"column": "tenant_id", "function": "modulo", "buckets": 1024},
        "orders": {"column": "tenant_id", "function": "modulo", "buckets": 1024,
                   "entity": {"type": "tenant", "column": "tenant_id"}},
        "bench_check": {"column": "id", "function": "modulo", "buckets": 1024},
        # zone a writes them all (the replication and copy benches' source)
        "bench_repl_rows": _ALL_IN_A,
        "bench_copy_rows": _ALL_IN_A,
        "bench_copy_lag": _ALL_IN_A,
    },
}  # fmt: skip


def publish_rules(cfg) -> None:
    """BENCH_RULES as the newest rules version of the bench's meta store (idempotent enough:
    a bench that runs again publishes the same rules once more)."""
    from zonesync.meta.store import MetaStore
    from zonesync.rules import parse

    store = MetaStore(dev_env.meta_config(cfg))
    current = store.rules_at()
    rules = parse(BENCH_RULES, "bench rules")
    if current is None or current[1].to_doc() != rules.to_doc():
        store.publish_rules(rules, "bench: the benches' tables")


class BenchEnv:
    """Zones and broker on free ports in a temp dir (no Airflow), torn down on exit."""

    def __init__(self, root: Path):
        base = procs.free_port_block(9)  # meta, three zones; the zones' Redis at base + 6..8
        self.cfg = config.load(
            {
                "ZONESYNC_STATE_DIR": str(root),
                "ZONESYNC_BASE_PORT": str(base),
                "ZONESYNC_KV_BASE_PORT": str(base + 5),
                "ZONESYNC_WITH_AIRFLOW": "0",
                "ZONESYNC_WITH_WORKERS": "0",
                # the deployment setting the benchmarks run with, when set (default: config's)
                **{k: os.environ[k] for k in ("ZONESYNC_KAFKA_PARTITIONS",) if k in os.environ},
            }
        )

    def __enter__(self):
        dev_env.up_databases(self.cfg)
        dev_env.up_meta(self.cfg)
        publish_rules(self.cfg)  # the first rules version: rows written with no version are judged by it
        dev_env.up_broker(self.cfg)
        dev_env.load_sample_schema(self.cfg)
        self.instances = {i.name.removeprefix("zone-"): i for i in dev_env.instances(self.cfg)}
        return self

    def __exit__(self, *exc):
        dev_env.down(self.cfg)


def print_table(rows: list[Row]) -> None:
    header = f"{'benchmark':<44} {'zonesync':>14} {'baseline':>14}  {'ratio':>6}  {'target':>7}  met"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.name:<44} {r.value:>10.0f} {r.unit:<3} {r.baseline:>10.0f} {r.unit:<3}  {r.ratio:>5.2f}x  "
            f">={r.target:<4.2f}x  {'yes' if r.judged and r.met else 'ref' if not r.judged else 'NO'}"
        )
    for r in rows:
        print(f"  {r.name}: baseline = {r.baseline_name}")


def run_sql(inst, *statements: str, db: str | None = None):
    """Statements on one autocommit connection to `inst`; the last one's rows."""
    conn = inst.connect(db)
    try:
        with conn.cursor() as cur:
            for st in statements:
                cur.execute(st)
            return cur.fetchall()
    finally:
        conn.close()


def _exec_one(inst, sql: str):
    conn = inst.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def settle(*instances, timeout: float = 90) -> float:
    """Have InnoDB flush what the earlier phases left dirty; seconds it took.

    Timed phases that follow heavy writes start from flushed servers (the replication
    suite's lag phases; each dump and each copy of the copy suite). Right after a
    260k-row catch-up the page cleaner writes back much of the buffer pool, slowly, and
    each commit's fsync queues behind it; whichever phase ran first paid for it. So:
    innodb_max_dirty_pages_pct = 0 until the dirty pages are gone, then back to what it
    was. Then the kernel's dirty file pages go too (os.sync): zone a writes its binlog
    without fsync (sync_binlog=0, the dev zones' setting), and after the bulk phase's
    600k rows the kernel wrote that back about 30 s later, in the middle of the first lag
    phase, queueing its commits' fsyncs (p99 0.1-0.8 s in its first windows, never in
    the second lag phase).
    """
    started = time.monotonic()
    saved = {inst: _exec_one(inst, "SELECT @@GLOBAL.innodb_max_dirty_pages_pct")[0][0] for inst in instances}
    try:
        for inst in instances:
            _exec_one(inst, "SET GLOBAL innodb_max_dirty_pages_pct = 0")
        while time.monotonic() - started < timeout:
            dirty = [
                _exec_one(inst, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")[0][1] for inst in instances
            ]
            if all(int(d) < 10 for d in dirty):
                break
            time.sleep(0.5)
    finally:
        for inst, pct in saved.items():
            _exec_one(inst, f"SET GLOBAL innodb_max_dirty_pages_pct = {float(pct)}")
    os.sync()
    return time.monotonic() - started


def run_job(cmd: list[str], env: dict, log_path: Path, what: str) -> tuple[float, float]:
    """Run a job (spark-submit, …) to its end, its output in `log_path`: (seconds, peak RSS
    MiB of its whole process tree, sampled every 0.2 s); RuntimeError naming `what` and
    the log's error lines when it fails."""
    import subprocess

    import psutil

    started, peak = time.monotonic(), 0.0
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        while proc.poll() is None:
            try:
                tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree) / 2**20)
            except psutil.Error:
                pass
            time.sleep(0.2)
    took = time.monotonic() - started
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()
        errors = [line for line in tail if "Error" in line or "Exception" in line][:5]
        raise RuntimeError(f"{what} failed: {' | '.join(errors) or tail[-5:]}")
    return took, peak
