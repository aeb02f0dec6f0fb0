"""S000-68: delivery slowed on the network. Zone b's applier reaches its zone through a TCP
proxy (tests/support/tcp_proxy.py) that, for a while, delays and throttles every chunk
both ways, while zone a keeps a steady load of guarded writes. What must hold:

- the lag of a -> b grows during the slowdown and shows in meta's apply_lag and in
  `zonesync lag` (events and seconds behind, the applier still reporting: not stale);
- no correctness check fires: no alert of any kind (row_locked, partition_halted,
  count_mismatch, ...), no resend request;
- after the slowdown, a -> b is back to its normal lag (measured before the slowdown:
  a few events in flight) while the same load goes on, and to exactly 0 behind once it
  stops; the zones converge and `zonesync reconcile` for b is clean. Zone c, applied
  directly, runs beside b throughout.

The same slowdown on the capture side (replicator a reading its binlog through the slow
link) shows in `zonesync lag`'s capture section: binlog bytes and seconds behind.
"""

from __future__ import annotations

import random
import time

import pytest

from tests.support.background import Background, wait_until
from tests.support.replication import Cluster, reset_state, settled_reconciliation, wait_converged
from tests.support.tcp_proxy import TcpProxy
from zonesync import cli
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.tools.progress import lag_report
from zonesync.apply.tools.reconcile import OK
from zonesync.capture.source import SourceDB

pytestmark = pytest.mark.integration

KEYS = range(1, 201)  # zone a's under the baseline rules


class SlowProxy(TcpProxy):
    """The proxy, with a slow link on demand: each chunk waits `delay` seconds, plus its
    size over `rate` bytes per second, before it is passed on (both ways)."""

    def __init__(self, target_port: int):
        super().__init__(target_port)
        self.delay = 0.0
        self.rate: float | None = None
        self.slowed_chunks = 0

    def slow(self, delay: float, rate: float | None) -> None:
        self.delay, self.rate = delay, rate

    def fast(self) -> None:
        self.delay, self.rate = 0.0, None

    def _chunk(self, data: bytes) -> None:
        delay, rate = self.delay, self.rate
        if delay or rate:
            self.slowed_chunks += 1
            time.sleep(delay + (len(data) / rate if rate else 0.0))


class SteadyLoad(Background):
    """Guarded inserts and updates of zone a's tenants, one row per transaction, about 100
    a second, until stopped."""

    name = "steady-load"

    def __init__(self, guard):
        super().__init__()
        self.guard = guard
        self.writes = 0
        self.error: BaseException | None = None

    def _run(self) -> None:
        rnd = random.Random(68)
        live: set[int] = set()
        try:
            while not self._stop.is_set():
                key = rnd.choice(KEYS)
                with self.guard.transaction() as tx:
                    if key in live:
                        tx.update("tenants", {"tenant_id": key}, {"name": f"w{self.writes}"})
                    else:
                        tx.insert("tenants", {"tenant_id": key, "name": f"w{self.writes}"})
                live.add(key)
                self.writes += 1
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _pair(meta, source: str, target: str):
    """(source, target, events behind, seconds behind, report age, stale) or None."""
    return next((r for r in lag_report(meta) if r[:2] == (source, target)), None)


def _lag_line(capsys, source: str, target: str) -> tuple[int, str]:
    """`zonesync lag`: its exit code and the line of source -> target."""
    code = cli.main(["lag"])
    out = capsys.readouterr()
    text = out.out + out.err
    line = next((line for line in text.splitlines() if line.split()[:2] == [source, target]), "")
    return code, line


@pytest.fixture
def slow_b(meta, zones, broker, test_cfg, guard_env):
    """Replicator a; appliers b (through a SlowProxy to zone b) and c (direct); fresh topics."""
    reset_state(zones, meta)
    proxy = SlowProxy(zones["b"].port).start()
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=4)
    cluster.start(which=("replicator",), zones=("a",))
    applier_b = cluster.make_applier("b")
    applier_b.writer_factory = lambda: ZoneWriter("127.0.0.1", proxy.port, "root", "", "zonesync_app")
    cluster.appliers["b"] = applier_b
    cluster.start(which=("applier",), zones=("b", "c"))
    cluster.wait_started()
    yield cluster, proxy
    proxy.fast()
    cluster.stop()
    proxy.cut()
    reset_state(zones, meta)


def test_lag_grows_while_the_network_is_slow_and_returns_to_zero_after(slow_b, guard_env, zones, meta, capsys):
    cluster, proxy = slow_b
    wait_until(lambda: (r := _pair(meta, "a", "b")) is not None and not r[5], 15, "applier b reports a -> b")
    with SteadyLoad(guard_env("a")) as load:
        wait_until(lambda: load.writes >= 100, 30, "the load is under way")
        # the normal lag under this load (a few events in flight, under a second: commit
        # times have whole seconds), reported every second
        normal = []
        for _ in range(12):
            normal.append(_pair(meta, "a", "b"))
            time.sleep(0.25)
        assert not any(r[5] for r in normal), normal
        normal_events, normal_seconds = max(r[2] for r in normal), max(r[3] for r in normal)

        # the slowdown: 0.3 s per chunk and 10 kB/s, each way, between applier b and zone b
        proxy.slow(0.3, 10_000)
        slowed_at = load.writes
        seen = {"events": 0, "seconds": 0.0}

        def grown() -> bool:
            row = _pair(meta, "a", "b")
            if row and not row[5]:
                seen["events"] = max(seen["events"], row[2])
                seen["seconds"] = max(seen["seconds"], row[3])
            return seen["events"] > normal_events and seen["seconds"] > normal_seconds

        wait_until(grown, 60, "a -> b reports more events and seconds behind than normal, while the link is slow")
        wait_until(
            lambda: (
                (got := _lag_line(capsys, "a", "b"))[1]
                and int(got[1].split()[2]) > normal_events
                and "STALE" not in got[1]
            ),
            30,
            "`zonesync lag` shows a -> b behind, not stale",
        )
        wait_until(lambda: load.writes >= slowed_at + 300, 60, "300 writes during the slowdown")
        slowed_writes = load.writes - slowed_at

        # the link is fast again: a -> b catches up under the same load, back to its normal lag
        proxy.fast()
        fast_at = time.monotonic()
        wait_until(
            lambda: (r := _pair(meta, "a", "b")) and r[2] <= normal_events and not r[5],
            60,
            "a -> b is back to its normal lag under the same load",
        )
        caught_up = time.monotonic() - fast_at
        assert load.error is None, load.error
    with capsys.disabled():
        print(
            f"\n{load.writes} writes, {slowed_writes} while slowed ({proxy.slowed_chunks} chunks slowed); a -> b "
            f"normally <= {normal_events} events / {normal_seconds:.1f} s behind, slowed up to {seen['events']} "
            f"events / {seen['seconds']:.1f} s; back to normal {caught_up:.1f} s after the link was"
        )

    # the load stopped: exactly nothing behind
    wait_until(
        lambda: (r := _pair(meta, "a", "b")) and r[2] == 0 and r[3] == 0.0 and not r[5],
        30,
        "a -> b is 0 behind once the load stopped",
    )
    wait_converged(zones, ("tenants",), timeout=60)
    code, line = _lag_line(capsys, "a", "b")
    assert code == 0 and line.split()[2] == "0" and "STALE" not in line, line
    rows = settled_reconciliation(meta, zones, "b", ["a"], timeout=20)
    assert rows and all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
    assert sum(r.committed for r in rows) == load.writes
    capsys.readouterr()
    assert cli.main(["reconcile", "--zone", "b", "--source", "a"]) == 0
    out = capsys.readouterr().out
    assert f"{cluster.partitions} partition(s) reconciled, 0 differ" in out, out
    # no correctness check fired for mere slowness
    raised, _ = meta.run("SELECT zone, kind FROM alerts")
    assert list(raised) == [], f"the slowdown raised alerts: {raised}"
    requests, _ = meta.run("SELECT source_zone, partition_no FROM resend_requests")
    assert list(requests) == [], f"the slowdown asked resends: {requests}"
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT COUNT(*) FROM zonesync.apply_state WHERE status <> 'running'")
        assert cur.fetchone()[0] == 0, "a partition of b halted"


def test_lag_shows_while_the_capture_side_is_slow(meta, zones, broker, test_cfg, guard_env, capsys):
    """The same slowdown on the capture side: replicator a reads zone a's binlog through the
    slow link, so zone a's commits reach the broker late. Zone b is behind zone a all the
    same, and `zonesync lag` says so for source a: in its capture section (capture/lag.py;
    the appliers, reading a broker that has nothing new, report 0 behind)."""
    reset_state(zones, meta)
    proxy = SlowProxy(zones["a"].port).start()
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=4)
    replicator = cluster.make_replicator("a")
    replicator.source = SourceDB("127.0.0.1", proxy.port, "root", "", ["zonesync_app"])
    cluster.replicators["a"] = replicator
    cluster.start(which=("replicator",), zones=("a",))
    cluster.start(which=("applier",), zones=("b", "c"))
    cluster.wait_started()
    try:
        with SteadyLoad(guard_env("a")) as load:
            wait_until(lambda: (r := _pair(meta, "a", "b")) is not None and not r[5], 15, "applier b reports a -> b")
            wait_until(lambda: load.writes >= 100, 30, "the load is under way")
            proxy.slow(0.3, 5_000)
            unpublished = lambda: load.writes - replicator.published  # noqa: E731
            wait_until(lambda: unpublished() > 100, 30, "zone a's replicator falls behind its zone")

            def lag_shows_a_behind() -> bool:
                """The capture section of `zonesync lag` (zone, binlog bytes behind, seconds behind)
                shows replicator a behind its binlog."""
                _, text = cli.main(["lag"]), capsys.readouterr().out
                lines = text.splitlines()
                start = next(i for i, line in enumerate(lines) if line.startswith("capture"))
                end = next((i for i, line in enumerate(lines) if line.startswith("source")), len(lines))
                rows = [line.split() for line in lines[start + 1 : end] if line.split()[:1] == ["a"]]
                return any(int(f[1]) > 0 and float(f[2]) > 0 for f in rows if "STALE" not in f)

            shown = wait_until(lag_shows_a_behind, 10, "`zonesync lag` shows source a behind", must=False)
            behind = unpublished()
            proxy.fast()
        assert shown, f"{behind} of zone a's changes were not in the broker, and `zonesync lag` showed a 0 behind"
        wait_converged(zones, ("tenants",), timeout=60)
    finally:
        proxy.fast()
        cluster.stop()
        proxy.cut()
        reset_state(zones, meta)
