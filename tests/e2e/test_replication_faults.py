"""kill -9 the replicator, the applier and the broker under a steady load; every zone converges.

The environment is a private `zonesync dev up` (workers as real processes); the
load runs through guards in this process. Faults, each healed by `zonesync dev up`
as an operator would: replicator-a killed, applier-b killed, then the broker
killed and restarted empty. Afterwards every zone holds exactly the rows the
writers committed: none lost, none extra, none stale.
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
from zonesync.meta import guards
from zonesync.rules import load_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
OWNED = {"a": range(0, 60), "b": range(400, 460), "c": range(800, 860)}


@pytest.fixture
def private_env(tmp_path):
    with private_dev_env(tmp_path / "state") as (env, cfg):
        yield env, cfg


def _kill(cfg, name):
    pid = json.loads((cfg.run_dir / f"{name}.json").read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    assert procs.wait_until(lambda: not procs.pid_matches(pid, "zonesync"), 10)


def _heal(env):
    result = subprocess.run([ZS, "dev", "up"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def _writer(guard, zone, stop, truth, lock):
    i = 0
    while not stop.is_set():
        tenant = OWNED[zone][i % len(OWNED[zone])]
        i += 1
        try:
            with guard.transaction() as tx:
                if i % 7 == 0 and tx.delete("tenants", {"tenant_id": tenant}):
                    value = None
                elif tx.update("tenants", {"tenant_id": tenant}, {"name": f"{zone}{i}"}):
                    value = f"{zone}{i}"
                else:
                    tx.insert("tenants", {"tenant_id": tenant, "name": f"{zone}{i}"})
                    value = f"{zone}{i}"
            with lock:
                truth[tenant] = value
        except WriteRefused:
            pass
        time.sleep(0.01)


def _rows(cfg, zone):
    inst = {i.name: i for i in dev_env.instances(cfg)}[f"zone-{zone}"]
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT tenant_id, name, _zs_version FROM tenants ORDER BY tenant_id")
        return cur.fetchall()


def test_kill_replicator_applier_and_broker_under_load(private_env):
    env, cfg = private_env
    meta = dev_env.meta_config(cfg)
    guards.push_and_wait(meta, load_file(REPO / "examples" / "rules.yaml"), "fault test")
    gs = {
        z.name: Guard(meta, z.name, ZoneDB("127.0.0.1", z.port, "root", "", "zonesync_app"), period=1.0).start()
        for z in cfg.zones
    }
    stop, lock, truth = threading.Event(), threading.Lock(), {}
    threads = [threading.Thread(target=_writer, args=(gs[z], z, stop, truth, lock)) for z in gs]
    for t in threads:
        t.start()
    try:
        time.sleep(2)
        _kill(cfg, "replicator-a")
        time.sleep(1)
        _heal(env)
        time.sleep(2)
        _kill(cfg, "applier-b")
        time.sleep(1)
        _heal(env)
        time.sleep(2)
        _kill(cfg, "broker")
        time.sleep(1)
        _heal(env)  # an empty broker on new ports; workers must find it and repair
        time.sleep(3)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for g in gs.values():
            g.close()
    expected = sorted((k, v) for k, v in truth.items() if v is not None)
    assert len(expected) > 50
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = {z: [(r[0], r[1]) for r in _rows(cfg, z)] for z in gs}
        if all(rows == expected for rows in state.values()):
            break
        time.sleep(0.5)
    for z, rows in state.items():
        missing = sorted(set(expected) - set(rows))[:5]
        extra = sorted(set(rows) - set(expected))[:5]
        assert rows == expected, f"zone {z}: missing {missing}, extra or stale {extra}"
    versions = {z: _rows(cfg, z) for z in gs}
    assert versions["a"] == versions["b"] == versions["c"], "versions differ between zones"
