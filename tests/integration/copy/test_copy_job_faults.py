"""The row-copy job as users run it: spark-submit to a Spark standalone cluster (master
and worker on 127.0.0.1), killed with SIGKILL mid-copy (driver and its process group),
then submitted again: it skips the chunks that committed and converges."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.integration.copy.conftest import zone_args
from tests.support.background import wait_until
from tests.support.replication import checksum, reset_state
from tests.support.spark_cluster import submit
from zonesync.copy import chunks

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = Path(__file__).resolve().parents[3] / "spark_jobs" / "full_copy.py"
ROWS, CHUNK = 30_000, 1_000


@pytest.fixture
def source_rows(zones, meta, clean_copies):
    reset_state(zones, meta)
    conn = zones["a"].connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        cur.executemany(
            "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, %s, 1, %s)",
            [(i, f"tenant {i}", 1000 + i) for i in range(1, ROWS + 1)],
        )
    conn.commit()
    conn.close()
    yield
    reset_state(zones, meta)


def _args(zones, tmp_path, run_id: str) -> list[str]:
    out = ["--run-id", run_id, "--source", "a", "--target", "b", "--table", "tenants", "--chunk-rows", str(CHUNK),
           "--parallel", "2", "--output", str(tmp_path / "out.json")]  # fmt: skip
    za = zone_args(zones, ("a", "b"))
    for z, u in zip(za["zone"], za["zone_user"], strict=True):
        out += ["--zone", z, "--zone-user", u]
    return out


def _done(zones, run_id: str) -> int:
    return sum(c["status"] == "done" for c in chunks.read(zones["b"].connect(), run_id, "tenants"))


def test_a_copy_killed_mid_way_on_a_standalone_cluster_resumes_and_converges(zones, standalone, source_rows,
                                                                              tmp_path):  # fmt: skip
    first = submit(JOB, _args(zones, tmp_path, "killed"), standalone.url, tmp_path / "first.log")
    try:
        wait_until(lambda: _done(zones, "killed") >= 4 or first.poll() is not None, 180, "4 chunks merged")
        log = (tmp_path / "first.log").read_text()[-2000:]
        assert first.poll() is None, f"the job ended before it was killed: {log}"
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(30)
    done_before = _done(zones, "killed")
    total = ROWS // CHUNK + 1
    assert 4 <= done_before < total, f"{done_before} of {total} chunks done when killed: kill it earlier"

    second = submit(JOB, _args(zones, tmp_path, "killed"), standalone.url, tmp_path / "second.log")
    assert second.wait(300) == 0, (tmp_path / "second.log").read_text()[-3000:]
    plan = chunks.read(zones["b"].connect(), "killed", "tenants")
    assert [c["status"] for c in plan] == ["done"] * total
    assert sum(c["rows_read"] for c in plan) == ROWS  # each chunk merged once, staged rows never counted twice
    assert checksum(zones["b"]) == checksum(zones["a"])
    log = (tmp_path / "second.log").read_text()
    # it began after the chunks that were done
    assert f"{total}/{total} chunks" in log and f"{done_before + 2}/{total} chunks" in log
