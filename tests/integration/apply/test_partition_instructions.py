"""S003-33: the arbiter's three exception instructions, per partition.

- ROLLBACK: `zonesync halt` stops a partition under a steady load: taken under the
  partition's apply_state row lock, so a batch that claimed it first commits, and every
  batch after finds it halted and writes nothing; the applier pauses it within a second
  while the other partitions go on. Halting it again is a no-op (exit 1, nothing changes).
- RESTART: `zonesync restart` halts, then resumes: the applier takes the partition again
  from its applied LSN.
- WARNING: a partition more than `lag_warning_s` behind raises one `lag_warning` alert per
  episode, and apply goes on.

After each, zone b equals zone a and `zonesync reconcile` finds every event applied once:
nothing in flight at the halt landed twice or was lost.
"""

from __future__ import annotations

import itertools
import time

import pytest

from tests.support.background import Background, wait_until
from tests.support.replication import alerts, checksum, insert_tenants, settled_reconciliation
from zonesync import cli
from zonesync.apply.tools.reconcile import OK

pytestmark = pytest.mark.integration


class Load(Background):
    """Updates of zone a's tenants 1..200 with ever higher versions, until stopped."""

    def __init__(self, conn):
        super().__init__()
        self.conn, self.versions = conn, itertools.count(1000)  # above insert_tenants' versions

    def _run(self) -> None:
        with self.conn.cursor() as cur:
            while not self._stop.is_set():
                version = next(self.versions)
                cur.execute(
                    "UPDATE zonesync_app.tenants SET name = %s, _zs_version = %s WHERE tenant_id = %s",
                    (f"v{version}", version, version % 200 + 1),
                )
                time.sleep(0.003)


def _b_state(zones) -> dict[int, tuple[int, str]]:
    """Zone b's apply_state of source a: partition -> (applied LSN, status)."""
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT partition_no, applied_lsn, status FROM zonesync.apply_state WHERE source_zone = 'a'")
        return {int(p): (int(lsn), st) for p, lsn, st in cur.fetchall()}


def _converged_once_each(zones, meta) -> None:
    wait_until(lambda: checksum(zones["b"]) == checksum(zones["a"]), 40, "zone b equals zone a")
    rows = settled_reconciliation(meta, zones, "b", ["a"], timeout=20)
    assert rows and all(r.status == OK for r in rows), rows


def test_halt_stops_one_partition_and_restart_takes_it_from_its_applied_lsn(cluster, zones, meta, capsys):
    conn = zones["a"].connect()
    conn.autocommit(True)
    insert_tenants(conn, 1, 200)
    wait_until(lambda: checksum(zones["b"]) == checksum(zones["a"]), 30, "b has a's tenants")
    applier = cluster.appliers["b"]
    with Load(conn):
        time.sleep(1)
        assert cli.main(["halt", "--zone", "b", "--source", "a", "--partition", "0", "--why", "test"]) == 0
        assert cli.main(["halt", "--zone", "b", "--source", "a", "--partition", "0"]) == 1, "already halted"
        wait_until(lambda: applier.book.state.get(("a", 0)) and applier.book.state[("a", 0)].halted, 10, "b pauses it")
        halted_at = _b_state(zones)[0]
        others = {p: lsn for p, (lsn, _) in _b_state(zones).items() if p != 0}
        time.sleep(2)
        assert _b_state(zones)[0] == halted_at, "nothing lands in a halted partition"
        assert halted_at[1] == "halted"
        moved = {p: lsn for p, (lsn, _) in _b_state(zones).items() if p != 0}
        assert any(moved[p] > others[p] for p in others), "the other partitions go on"
        assert cli.main(["resume", "--zone", "b", "--source", "a", "--partition", "0"]) == 0
        wait_until(lambda: _b_state(zones)[0][0] > halted_at[0], 15, "resumed from its applied LSN")
        # RESTART under the same load: halted, then resumed from its applied LSN
        assert cli.main(["restart", "--zone", "b", "--source", "a", "--partition", "1", "--settle", "1.5"]) == 0
        assert _b_state(zones)[1][1] == "running"
        time.sleep(1)
    _converged_once_each(zones, meta)
    assert alerts(meta, "b", "partition_halted") == [], "an operator's halt raises no alert"
    capsys.readouterr()


def test_a_partition_behind_past_the_threshold_warns_once(cluster, zones, meta):
    """b's applier comes back after a's burst and catches up one event per round: it runs
    more than a second behind for a while (one lag_warning per partition), then catches up."""
    conn = zones["a"].connect()
    conn.autocommit(True)
    cluster.stop("applier-b")
    insert_tenants(conn, 1, 300)
    time.sleep(2)
    cluster.start(which=("applier",), zones=("b",), max_batch=1, lag_warning_s=1.0)
    wait_until(lambda: checksum(zones["b"]) == checksum(zones["a"]), 60, "b catches up")
    warned = alerts(meta, "b", "lag_warning")
    assert warned, "no lag_warning while b ran more than a second behind"
    assert all(w["source"] == "a" and w["behind_seconds"] >= 1.0 for w in warned), warned
    per_partition = [w["partition"] for w in warned]
    assert len(per_partition) == len(set(per_partition)), f"one warning per partition and episode: {warned}"
    time.sleep(2)
    assert len(alerts(meta, "b", "lag_warning")) == len(warned), "no more warnings once caught up"
    assert alerts(meta, "b", "partition_halted") == [] and alerts(meta, "b", "row_locked") == []
