"""Lag while an applier is stopped and while it catches up (S000-68, S002-19): zone a keeps
writing at its own pace, `zonesync lag` shows b behind (stale while its applier is stopped,
events behind while it catches up slowly), then 0 behind; no alert is raised for lag."""

from __future__ import annotations

import time

import pytest

from tests.support.background import wait_until
from tests.support.replication import insert_tenants, wait_converged
from zonesync import cli
from zonesync.apply.tools.progress import STALE_AFTER_S, lag_report

pytestmark = pytest.mark.integration


def _pair(meta, source="a", target="b"):
    return next((r for r in lag_report(meta) if r[:2] == (source, target)), None)


def _lag_cli(capsys) -> tuple[int, str]:
    code = cli.main(["lag"])
    out = capsys.readouterr()
    return code, out.out + out.err


def _a_b_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.split()[:2] == ["a", "b"])


def test_lag_grows_while_the_applier_is_stopped_and_drops_back_after(cluster, zones, meta, capsys):
    wait_until(lambda: _pair(meta) is not None and not _pair(meta)[5], 10, "applier b reports a -> b, fresh")
    conn = zones["a"].connect()
    conn.autocommit(True)
    try:
        cluster.stop("applier-b")
        # S002-19: the source goes on committing without waiting for zone b.
        latencies = []
        for t in range(1, 301):
            start = time.monotonic()
            insert_tenants(conn, t, 1)
            latencies.append(time.monotonic() - start)
        assert max(latencies) < 1.0, f"a write in zone a took {max(latencies):.3f} s while applier b was stopped"

        wait_until(lambda: _pair(meta)[5], STALE_AFTER_S + 10, "a -> b shows as stale")
        code, out = _lag_cli(capsys)
        assert code == 1, out
        assert "STALE: zone b's applier" in _a_b_line(out), out

        # Back, catching up one event per round: the fresh reports show events behind.
        cluster.start(which=("applier",), zones=("b",), max_batch=1)
        seen_behind = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            row = _pair(meta)
            if not row[5]:
                seen_behind = max(seen_behind, row[2])
                if seen_behind > 0 and row[2] == 0:
                    break
            time.sleep(0.02)
        assert seen_behind > 0, "applier b never reported being behind while catching up"

        wait_converged(zones, ("tenants",))
        wait_until(
            lambda: (r := _pair(meta)) is not None and r[2] == 0 and r[3] == 0.0 and not r[5],
            10,
            "a -> b is back to 0 behind, fresh",
        )
        code, out = _lag_cli(capsys)
        assert code == 0, out
        line = _a_b_line(out)
        assert line.split()[2] == "0" and "STALE" not in line, out
    finally:
        conn.close()
    raised, _ = meta.run("SELECT zone, kind FROM alerts")
    assert list(raised) == [], f"mere lag raised alerts: {raised}"
