"""Running zone switch steps from tests, and writers that record what each zone accepted."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from zonesync.dal import ZoneReshardingBlocked
from zonesync.dal.errors import WrongZone
from zonesync.meta.store import MetaStore
from zonesync.switch import steps
from zonesync.switch.steps import SwitchContext, SwitchParams

ZONES_OF: dict[str, dict] = {}  # switch run id -> the test's zones (verify's Spark job needs their ports)


def context(meta, zones, run_id: str | None = None, **params) -> SwitchContext:
    base = dict(zsids="0-99", from_zone="a", to_zone="b", reason="test switch", ack_timeout_s=3.0, max_txn_ms=300)
    base.update(params)
    ctx = SwitchContext(
        meta=meta,
        run_id=run_id or f"test-{uuid.uuid4().hex[:8]}",
        params=SwitchParams(**base),
        zone_conn=lambda z: zones[z].connect("zonesync_app"),
    )
    ZONES_OF[ctx.run_id] = zones
    return ctx


def wait_sync(ctx: SwitchContext, timeout: float) -> list[str]:
    """The wait_sync sensor's loop: [] once every zone reached P, else who is behind."""
    deadline = time.monotonic() + timeout
    while True:
        behind = steps.behind_zones(ctx)
        if not behind or time.monotonic() > deadline:
            return behind
        time.sleep(0.05)


def verify(ctx: SwitchContext, settle_timeout_s: float = 30.0) -> dict:
    """The DAG's verify_start, verify_check (the consistency check's Spark job, here in the
    test run's session) and verify."""
    import tempfile
    from pathlib import Path

    from spark_jobs import consistency_check
    from tests.integration.check.conftest import job_args
    from tests.support.spark import session

    started = steps.run_step(ctx, "verify_start")
    args = job_args(ctx.meta, ZONES_OF[ctx.run_id], Path(tempfile.mkdtemp(prefix="verify-")),
                    started["check_run_id"], tables=started["tables"].split(","), parallel=8,
                    settle_timeout_s=settle_timeout_s, docs=None)  # fmt: skip
    result = consistency_check.run(session(), args)
    return steps.run_step(ctx, "verify", result=result)


def run_switch(ctx: SwitchContext, sync_timeout: float = 30.0) -> None:
    for step in ("preflight", "record_state", "block", "reshard", "sync_position"):
        steps.run_step(ctx, step)
    assert wait_sync(ctx, sync_timeout) == [], "every zone reaches P"
    steps.run_step(ctx, "activate")
    verify(ctx)


def wait_replication_reported(meta, source: str = "a", timeout: float = 15.0) -> None:
    """Preflight needs every applier's lag report for `source`'s stream."""
    zones = set(MetaStore(meta).zones()) - {source}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows, _ = meta.run("SELECT DISTINCT target_zone FROM apply_lag WHERE source_zone = %s", (source,))
        if {r[0] for r in rows} >= zones:
            return
        time.sleep(0.1)
    raise AssertionError(f"appliers did not report lag of zone {source}'s stream within {timeout} s")


@dataclass
class Accepted:
    zone: str
    tenant: int
    started: float  # time.monotonic() before the transaction began
    committed: float  # after commit returned


@dataclass
class Writers:
    """Threads writing tenants through guards of zones a and b; each write is tried in
    both zones, so whichever accepts it is recorded: the single-writer evidence."""

    guards: dict
    moved: range
    unmoved: dict  # zone -> tenants it owns throughout
    accepted: list[Accepted] = field(default_factory=list)
    refused_unmoved: list[tuple[str, int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def _write(self, zone: str, tenant: int, n: int) -> bool:
        started = time.monotonic()
        try:
            with self.guards[zone].transaction() as tx:
                if n == 0:
                    tx.insert("tenants", {"tenant_id": tenant, "name": f"{zone}{n}"})
                elif not tx.update("tenants", {"tenant_id": tenant}, {"name": f"{zone}{n}"}):
                    raise LookupError(f"tenant {tenant} not in zone {zone} yet")
        except (ZoneReshardingBlocked, WrongZone) as exc:
            if tenant not in self.moved:
                self.refused_unmoved.append((zone, tenant, str(exc)))
            return False
        self.accepted.append(Accepted(zone, tenant, started, time.monotonic()))
        return True

    def _loop(self, tenants: list[int], zones: list[str]) -> None:
        n = {t: 0 for t in tenants}
        while not self.stop.is_set():
            for t in tenants:
                for z in zones:
                    try:
                        if self._write(z, t, n[t]):
                            n[t] += 1
                            break
                    except Exception:  # noqa: BLE001 - a write racing replication of the same row: try later
                        pass
            time.sleep(0.01)

    def start(self) -> Writers:
        moved = list(self.moved)[:6]
        self.threads.append(threading.Thread(target=self._loop, args=(moved, ["a", "b"]), daemon=True))
        for zone, tenants in self.unmoved.items():
            self.threads.append(threading.Thread(target=self._loop, args=(list(tenants)[:3], [zone]), daemon=True))
        for t in self.threads:
            t.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def moved_by_zone(self) -> dict[str, list[Accepted]]:
        out: dict[str, list[Accepted]] = {"a": [], "b": []}
        for w in self.accepted:
            if w.tenant in self.moved:
                out[w.zone].append(w)
        return out
