"""A zone's MariaDB primary killed with kill -9 under load, replaced by its replica (seeds
S001-10, S003-38): capture goes on there from its checkpoint's GTID position, the
appliers follow, and every zone converges on what the writers committed.

The environment is a private `zonesync dev up` (replicators and appliers as real
processes) with a GTID replica of zone a (`zonesync dev replica a`). Writers run
through guards in all three zones; zone a's primary is killed mid-load; the replica is
promoted as an operator would (relay log applied, replication stopped), and
`zonesync zones set-primary a HOST:PORT` maps capture onto it. Zone a's writers then
write there. Afterwards every zone holds the same rows, each the last value its writer
committed (a write in flight when the primary died may have landed or not: either
value is right, the same in every zone), reconcile finds nothing to alert, and no row
was locked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.private_env import ZS, private_dev_env
from zonesync.dal import Guard, WriteRefused, ZoneDB
from zonesync.dev import env as dev_env
from zonesync.dev import procs
from zonesync.dev import replica as dev_replica
from zonesync.meta import guards
from zonesync.rules import load_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
OWNED = {"a": range(0, 60), "b": range(400, 460), "c": range(800, 860)}


@pytest.fixture
def private_env(tmp_path):
    with private_dev_env(tmp_path / "state", ports=40) as (env, cfg):
        yield env, cfg


class Writer(threading.Thread):
    """Writes zone `zone`'s tenants through its guard; `guard` may be replaced (after a
    failover). Records what each tenant last committed, and for a write whose outcome is
    unknown (the database died under it) both values it may have."""

    def __init__(self, guard, zone):
        super().__init__(daemon=True)
        self.guard, self.zone = guard, zone
        self.stop = threading.Event()
        self.truth: dict[int, str | None] = {}
        self.maybe: dict[int, set] = {}
        self.failed = 0

    def run(self):
        i = 0
        while not self.stop.is_set():
            tenant = OWNED[self.zone][i % len(OWNED[self.zone])]
            i += 1
            value = None
            try:
                with self.guard.transaction() as tx:
                    if i % 7 == 0 and tx.delete("tenants", {"tenant_id": tenant}):
                        value = None
                    elif tx.update("tenants", {"tenant_id": tenant}, {"name": f"{self.zone}{i}"}):
                        value = f"{self.zone}{i}"
                    else:
                        tx.insert("tenants", {"tenant_id": tenant, "name": f"{self.zone}{i}"})
                        value = f"{self.zone}{i}"
                self.truth[tenant] = value
                self.maybe.pop(tenant, None)
            except WriteRefused:
                pass
            except Exception:  # noqa: BLE001 - the zone's database died: the outcome is unknown
                self.failed += 1
                self.maybe.setdefault(tenant, {self.truth.get(tenant)}).add(f"{self.zone}{i}")
                self.maybe[tenant].add(None)
                time.sleep(0.1)
            time.sleep(0.01)


def _rows(port):
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", database="zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT tenant_id, name, _zs_version FROM tenants ORDER BY tenant_id")
            return cur.fetchall()
    finally:
        conn.close()


def _applied(port) -> dict[tuple[str, int], int]:
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", database="zonesync")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT source_zone, partition_no, applied_lsn FROM apply_state")
            return {(s, int(p)): int(lsn) for s, p, lsn in cur.fetchall()}
    finally:
        conn.close()


def _zs(env, *args, timeout=120):
    return subprocess.run([ZS, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_a_zone_primary_killed_under_load_fails_over_to_its_replica_and_every_zone_converges(private_env):
    env, cfg = private_env
    meta = dev_env.meta_config(cfg)
    replica_port = cfg.meta_port + 30
    started = _zs(env, "dev", "replica", "a", "--port", str(replica_port))
    assert started.returncode == 0, started.stdout + started.stderr
    guards.push_and_wait(meta, load_file(REPO / "examples" / "rules.yaml"), "failover test")
    ports = {z.name: z.port for z in cfg.zones}

    def guard(zone, port):
        return Guard(meta, zone, ZoneDB("127.0.0.1", port, "root", "", "zonesync_app"), period=1.0).start()

    writers = {z: Writer(guard(z, ports[z]), z) for z in ports}
    for w in writers.values():
        w.start()
    try:
        time.sleep(3)
        primary = json.loads((cfg.run_dir / "zone-a.json").read_text())["pid"]
        os.killpg(primary, signal.SIGKILL)  # the zone's primary dies mid-load
        assert procs.wait_until(lambda: not procs.pid_matches(primary, "mariadbd"), 10)
        time.sleep(1)  # the others write on; zone a refuses
        replica = dev_replica.instance(cfg, "a", replica_port)
        dev_replica.promote(replica)
        # zone a's applied LSNs are rows of zone a: the replica has them (they carry over)
        carried = _applied(replica_port)
        assert {"b", "c"} <= {source for source, _p in carried} and all(carried.values()), carried
        began = time.monotonic()
        moved = _zs(env, "zones", "set-primary", "a", f"127.0.0.1:{replica_port}", "--reason", "primary died")
        print(f"set-primary took {time.monotonic() - began:.1f} s (the old replicator's lease waited out)")
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert "segment 1" in moved.stdout, moved.stdout
        old_guard, writers["a"].guard = writers["a"].guard, guard("a", replica_port)
        old_guard.close()
        ports["a"] = replica_port
        time.sleep(4)  # load on the new primary
    finally:
        for w in writers.values():
            w.stop.set()
        for w in writers.values():
            w.join(15)
            w.guard.close()
    assert writers["a"].failed > 0, "zone a's writer never met the dead primary: the kill did not happen mid-load"
    truth = {t: v for w in writers.values() for t, v in w.truth.items()}
    maybe = {t: vs for w in writers.values() for t, vs in w.maybe.items()}
    assert len(truth) > 100

    def converged():
        rows = {z: _rows(p) for z, p in ports.items()}
        return rows if rows["a"] == rows["b"] == rows["c"] else None

    # after the failover zone a's appliers went on from those LSNs, never from the start
    after = _applied(replica_port)
    assert all(after[key] >= lsn for key, lsn in carried.items()), (carried, after)
    assert procs.wait_until(lambda: converged() is not None, 120, interval=0.5), {
        z: len(_rows(p)) for z, p in ports.items()
    }
    got = {t: name for t, name, _v in converged()["a"]}
    for tenant in set(truth) | set(maybe):
        want = maybe.get(tenant, {truth.get(tenant)})
        assert got.get(tenant) in want, f"tenant {tenant}: {got.get(tenant)!r}, committed {want}"
    # capture went on on the promoted replica: segment 1 reads it, LSNs above the old ones
    listed = _zs(env, "zones", "primaries", "a")
    assert f"127.0.0.1:{replica_port}" in listed.stdout and listed.stdout.count("\n") == 2, listed.stdout
    for zone in ("a", "b", "c"):
        rec = _zs(env, "reconcile", "--zone", zone)
        assert rec.returncode == 0, rec.stdout + rec.stderr
    alerts = _zs(env, "alerts")
    for kind in ("row_locked", "partition_halted", "gap", "primary_changed"):
        assert kind not in alerts.stdout, alerts.stdout
    assert "primary_promoted" in alerts.stdout, alerts.stdout
