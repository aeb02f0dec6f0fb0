"""The consistency check against pt-table-checksum, on the same three servers.

The same CHECK_ROWS rows (10M by default, `ZONESYNC_BENCH_CHECK_ROWS`, 1000..10M) are
written straight into zones a, b and c (no replication of the fill); then, each taking
turns at going first, from flushed servers:

- baseline: `pt-table-checksum` (Debian's percona-toolkit) of the table on zone a, with
  b and c following a as native MariaDB replicas for the time of the suite (no zonesync
  worker runs here): pt-table-checksum checksums each chunk on the source and has the
  replicas compute the same through statement-based replication, so its wall time for
  these three zones is the baseline (its default dynamic chunking, 0.5 s chunks);
- zonesync: `spark-submit spark_jobs/consistency_check.py` (local[2], driver 512 MiB,
  the driver's class-data archive, C1 only: the DAG's settings) comparing a, b and c:
  100k-row chunks (the DAG's default; 0.5-1 s less than 50k here), each chunk's
  checksum computed by every zone itself.

Both read the same three servers on the same two cores. Wall time from start to exit,
best of CHECK_REPS (2) each; every repeat is printed. Target: zonesync within
pt-table-checksum's time for the three zones (row ``check: 3 zones, pt-table-checksum's
time / ours``, >= 1.0x; moonshot 2x). Then, replication stopped, 100 differences are
injected into b and c (changed values, deleted and extra rows) and the check must find
every one (row ``check: injected differences found``). Peak RSS of the job's processes
at CHECK_ROWS against a tenth of them: flat is within 1.25x (row ``check: peak RSS``).

No zonesync replication runs in this suite: the check's settle step has nothing to wait
for (`--settle-timeout-s 1`), and its event counts are empty.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import BenchEnv, Row, publish_rules, run_job, settle
from zonesync import jvm
from zonesync.dev import env as dev_env

CHECK_ROWS = int(os.environ.get("ZONESYNC_BENCH_CHECK_ROWS", 10_000_000))
CHECK_REPS = int(os.environ.get("ZONESYNC_BENCH_CHECK_REPS", 2))
# the check's chunk size and chunks per wave (the DAG's defaults unless set)
CHECK_CHUNK_ROWS = int(os.environ.get("ZONESYNC_BENCH_CHECK_CHUNK_ROWS", 100_000))
CHECK_PARALLEL = int(os.environ.get("ZONESYNC_BENCH_CHECK_PARALLEL", 16))
if not (1_000 <= CHECK_ROWS <= 10_000_000 and CHECK_REPS >= 1):
    raise SystemExit("ZONESYNC_BENCH_CHECK_ROWS: 1000..10000000; ZONESYNC_BENCH_CHECK_REPS: at least 1")
JOB = Path(__file__).resolve().parents[1] / "spark_jobs" / "consistency_check.py"
TABLE = "bench_check"
DDL = (
    f"CREATE TABLE IF NOT EXISTS zonesync_app.{TABLE} (id BIGINT PRIMARY KEY, k INT NOT NULL, "
    "v VARCHAR(64) NOT NULL, amount DECIMAL(12,2) NULL, _zs_origin SMALLINT NOT NULL DEFAULT 1, "
    "_zs_version BIGINT NOT NULL DEFAULT 1)"
)
INJECTED = 100


def _exec(inst, *sql, fetch=False):
    conn = inst.connect()
    try:
        with conn.cursor() as cur:
            for s in sql:
                cur.execute(s)
            out = cur.fetchall() if fetch else None
        conn.commit()
        return out
    finally:
        conn.close()


def _fill(inst, rows: int) -> None:
    _exec(inst, "SET SESSION sql_log_bin = 0", "CREATE DATABASE IF NOT EXISTS zonesync_app", "USE zonesync_app", DDL,
          f"TRUNCATE zonesync_app.{TABLE}",
          f"INSERT INTO zonesync_app.{TABLE} SELECT seq, seq % 1000, CONCAT('row ', seq, ' of the check bench'), "
          f"seq / 100, 1 + seq % 3, 1000 + seq FROM seq_1_to_{rows}")  # fmt: skip


def _follow(replica, src) -> None:
    """`replica` replicates `src` from its binlog's end (MariaDB's own replication)."""
    file, pos = _exec(src, "SHOW MASTER STATUS", fetch=True)[0][:2]
    _exec(replica, "STOP SLAVE", "RESET SLAVE ALL",
          f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={src.port}, MASTER_USER='root', "
          f"MASTER_PASSWORD='', MASTER_LOG_FILE='{file}', MASTER_LOG_POS={pos}, MASTER_USE_GTID=no",
          "START SLAVE")  # fmt: skip


def _unfollow(replica) -> None:
    _exec(replica, "STOP SLAVE", "RESET SLAVE ALL")


def _pt_table_checksum(a, replicas) -> float:
    # in a's binlog: the replica needs the database pt-table-checksum keeps its checksums in
    _exec(a, "CREATE DATABASE IF NOT EXISTS percona",
          "CREATE TABLE IF NOT EXISTS percona.dsns (id INT AUTO_INCREMENT PRIMARY KEY, parent_id INT, "
          "dsn VARCHAR(255))",
          "TRUNCATE percona.dsns",
          *[f"INSERT INTO percona.dsns (dsn) VALUES ('h=127.0.0.1,P={r.port},u=root')" for r in replicas])  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        ["pt-table-checksum", f"h=127.0.0.1,P={a.port},u=root", "--databases", "zonesync_app", "--tables", TABLE,
         "--recursion-method", "dsn=D=percona,t=dsns", "--no-check-binlog-format", "--no-version-check",
         "--replicate", "percona.checksums"],
        capture_output=True, text=True,
    )  # fmt: skip
    took = time.monotonic() - started
    if done.returncode not in (0, 16):  # 16: differences found (none expected here)
        raise RuntimeError(f"pt-table-checksum failed ({done.returncode}): {done.stderr[-500:]} {done.stdout[-500:]}")
    print(f"pt-table-checksum: {' '.join(done.stdout.split()[-9:])}")
    return took


def _check_run(env: BenchEnv, run_id: str, workdir: Path) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one check of a, b and c, its run row made first."""
    from zonesync.check import steps
    from zonesync.check.request import CheckRequest

    meta = dev_env.meta_config(env.cfg)
    inst = env.instances
    ctx = steps.CheckContext(meta, run_id, CheckRequest(tables=(TABLE,), chunk_rows=CHECK_CHUNK_ROWS, reason="bench"),
                             lambda z: inst[z].connect("zonesync_app"), actor="bench")  # fmt: skip
    steps.preflight(ctx)
    steps.record_start(ctx)
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    cmd = [str(home / "bin" / "spark-submit"), "--master", "local[2]", "--driver-memory", "512m",
           *jvm.submit_options(dispatch_only=True),
           str(JOB), "--run-id", run_id, "--table", TABLE, "--settle-timeout-s", "1", "--max-lag-s", "0",
           "--parallel", str(CHECK_PARALLEL),
           "--meta", f"mysql://{meta.user}@{meta.host}:{meta.port}/{meta.database}",
           "--output", str(workdir / f"{run_id}.json"),
           *[a for z in ("a", "b", "c") for a in ("--zone", f"{z}=jdbc:mysql://127.0.0.1:{inst[z].port}/zonesync_app")],
           ]  # fmt: skip
    env_vars = dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable,
                    ZONESYNC_STATE_DIR=str(env.cfg.state_dir), ZONESYNC_BASE_PORT=str(env.cfg.meta_port))  # fmt: skip
    took, peak = run_job(cmd, env_vars, workdir / f"{run_id}.log", "consistency_check")
    import json

    steps.finish(ctx, json.loads((workdir / f"{run_id}.json").read_text()))
    return took, peak


def _inject(b, c, rows: int) -> set[str]:
    """INJECTED differences in b and c, spread over the table: changed values, deleted
    rows and extra rows; their keys."""
    rnd = random.Random(20)
    keys = rnd.sample(range(1, rows + 1), INJECTED - 10)
    stmts = {b: ["SET SESSION sql_log_bin = 0"], c: ["SET SESSION sql_log_bin = 0"]}
    for i, k in enumerate(keys):
        inst = b if i % 2 else c
        if i % 3 == 0:
            stmts[inst].append(f"DELETE FROM zonesync_app.{TABLE} WHERE id = {k}")
        else:
            stmts[inst].append(f"UPDATE zonesync_app.{TABLE} SET v = CONCAT(v, '!') WHERE id = {k}")
    extra = [rows + 1000 + i for i in range(10)]
    for i, k in enumerate(extra):
        stmts[b if i % 2 else c].append(f"INSERT INTO zonesync_app.{TABLE} VALUES ({k}, 1, 'extra', 1, 1, 5)")
    for inst, sql in stmts.items():
        _exec(inst, *sql)
    return {f"[{k}]" for k in [*keys, *extra]}


def run(env: BenchEnv) -> list[Row]:
    dev_env.up_meta(env.cfg)
    dev_env.up_zone_bookkeeping(env.cfg)
    publish_rules(env.cfg)  # its table declared (ZSID = id mod 1024)
    a, b, c = (env.instances[z] for z in ("a", "b", "c"))
    workdir = env.cfg.state_dir / "bench-check"
    workdir.mkdir(parents=True, exist_ok=True)
    small = max(CHECK_ROWS // 10, 1000)
    for inst in (a, b, c):
        _fill(inst, small)
    _, peak_small = _check_run(env, "bench-check-small", workdir)
    for inst in (a, b, c):
        _fill(inst, CHECK_ROWS)
    for replica in (b, c):
        _follow(replica, a)
    ours, theirs, peaks = [], [], []
    try:
        for rep in range(CHECK_REPS):
            phases = ("pt", "zs") if rep % 2 == 0 else ("zs", "pt")
            for phase in phases:
                settle(a, b, c)
                if phase == "pt":
                    theirs.append(_pt_table_checksum(a, (b, c)))
                else:
                    took, peak = _check_run(env, f"bench-check-{rep}", workdir)
                    ours.append(took)
                    peaks.append(peak)
            print(f"check of {CHECK_ROWS:,} rows in 3 zones, repeat {rep + 1}/{CHECK_REPS}: pt-table-checksum "
                  f"{theirs[-1]:.1f} s, zonesync {ours[-1]:.1f} s ({theirs[-1] / ours[-1]:.2f}x), "
                  f"peak RSS {peaks[-1]:.0f} MiB")  # fmt: skip
    finally:
        for replica in (b, c):
            _unfollow(replica)
    planted = _inject(b, c, CHECK_ROWS)
    _check_run(env, "bench-check-injected", workdir)
    from zonesync.check.store import CheckStore

    found = {d["key"] for d in CheckStore(dev_env.meta_config(env.cfg)).diffs("bench-check-injected", limit=10_000)}
    print(f"injected {len(planted)} differences, found {len(planted & found)}, reported {len(found)}")
    for inst in (a, b, c):
        _exec(inst, "SET SESSION sql_log_bin = 0", f"DROP TABLE zonesync_app.{TABLE}")
    return [
        Row("check: 3 zones, pt-table-checksum's time / ours", 1 / min(ours), 1 / min(theirs), "1/s", 1.0,
            f"pt-table-checksum of the same {CHECK_ROWS:,}-row table on a, b and c replicating a (ratio = "
            f"pt's {min(theirs):.1f} s / ours {min(ours):.1f} s), best of {CHECK_REPS} each"),
        Row("check: injected differences found", len(planted & found) - (len(found) - len(planted & found)),
            len(planted), "rows", 1.0, f"{INJECTED} planted in b and c (found minus false reports)"),
        Row("check: peak RSS, 1/10 vs all rows", peak_small, max(peaks), "MiB", 0.8,
            f"the same check of {small:,} rows (ratio = small peak / full peak: flat is 1.0)"),
    ]  # fmt: skip
