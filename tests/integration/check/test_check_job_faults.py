"""The consistency check as users run it: spark-submit to a Spark standalone cluster
(master and worker on 127.0.0.1), killed with SIGKILL mid-check (the driver and its
process group), then submitted again: it keeps the chunks it finished, checks the rest,
and finds the difference planted past where it was killed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.integration.check.conftest import TABLE, context, sql
from tests.integration.copy.conftest import zone_args
from tests.support.background import wait_until
from tests.support.rules import meta_url
from tests.support.spark_cluster import submit
from zonesync.check import steps
from zonesync.check.store import CheckStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = Path(__file__).resolve().parents[3] / "spark_jobs" / "consistency_check.py"
ROWS, CHUNK = 60_000, 500


def _args(meta, zones, tmp_path, run_id: str) -> list[str]:
    out = ["--run-id", run_id, "--table", TABLE, "--parallel", "2", "--settle-timeout-s", "1", "--max-lag-s", "0",
           "--meta", meta_url(meta), "--output", str(tmp_path / "out.json")]  # fmt: skip
    za = zone_args(zones)
    for z, u in zip(za["zone"], za["zone_user"], strict=True):
        out += ["--zone", z, "--zone-user", u]
    return out


def _done(meta, run_id: str) -> dict[int, object]:
    return {c["chunk"]: c["done_at"] for c in CheckStore(meta).chunks(run_id, TABLE) if c["status"] != "pending"}


def test_a_check_killed_mid_way_on_a_standalone_cluster_resumes(zones, meta, standalone, types_table, tmp_path):
    types_table(ROWS)
    sql(zones["c"], f"UPDATE {TABLE} SET name = 'planted' WHERE id = {ROWS - 10}")  # in one of the last chunks
    ctx = context(meta, zones, "chk-killed", chunk_rows=CHUNK)
    steps.preflight(ctx)
    steps.record_start(ctx)
    first = submit(JOB, _args(meta, zones, tmp_path, "chk-killed"), standalone.url, tmp_path / "first.log")
    try:
        wait_until(lambda: len(_done(meta, "chk-killed")) >= 6 or first.poll() is not None, 180, "6 chunks checked")
        log = (tmp_path / "first.log").read_text()[-2000:]
        assert first.poll() is None, f"the job ended before it was killed: {log}"
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(30)
    before = _done(meta, "chk-killed")
    total = len(CheckStore(meta).chunks("chk-killed", TABLE))
    assert 6 <= len(before) < total, f"{len(before)} of {total} chunks checked when killed: kill it earlier"

    second = submit(JOB, _args(meta, zones, tmp_path, "chk-killed"), standalone.url, tmp_path / "second.log")
    assert second.wait(300) == 0, (tmp_path / "second.log").read_text()[-3000:]
    after = _done(meta, "chk-killed")
    assert len(after) == total and {n: after[n] for n in before} == before  # finished chunks not checked again
    assert [d["key"] for d in CheckStore(meta).diffs("chk-killed")] == [f"[{ROWS - 10}]"]
