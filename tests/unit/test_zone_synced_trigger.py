"""ZoneSyncedTrigger on its own: serialization, both events, connections closed however it
ends, zone connections with timeouts, and the triggerer's event loop never blocked.

The probe's answers are scripted here; the real wait against real zones runs in
tests/dags/test_zone_switch_dag.py (wait_sync defers until the applier catches up).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time

import pytest
from airflow.sdk import Connection  # airflow first: its start imports the plugin (airflow_local_settings)

from zonesync.switch.steps import SwitchContext, SwitchParams, SyncProbe

pytestmark = pytest.mark.unit


def _trigger(**kw):
    from zonesync_airflow.triggers.switch import ZoneSyncedTrigger

    args = {"run_id": "manual__1", "from_zone": "a", "to_zone": "b", "timeout_s": 5.0, "poll_interval": 0.01}
    return ZoneSyncedTrigger(**{**args, **kw})


class ScriptedProbe:
    """Answers behind() from a script (the last answer repeats), each after `delay_s` in its thread."""

    def __init__(self, *answers, delay_s=0.0):
        self.answers, self.delay_s = list(answers), delay_s
        self.polls = 0
        self.closed = False

    def behind(self):
        assert not self.closed, "polled a closed probe"
        time.sleep(self.delay_s)
        self.polls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self):
        self.closed = True


def _scripted(monkeypatch, trigger, probe):
    async def open_probe():
        return probe

    monkeypatch.setattr(trigger, "_open_probe", open_probe)
    return probe


async def _events(trigger):
    return [e.payload async for e in trigger.run()]


def test_serialize_round_trips():
    trigger = _trigger(timeout_s=120.0, waited_s=5.01, meta_conn_id="m", zone_conn_prefix="z_", poll_interval=0.5)
    classpath, kwargs = trigger.serialize()
    assert classpath == "zonesync_airflow.triggers.switch.ZoneSyncedTrigger"
    json.dumps(kwargs)  # stored in the metadata DB as it is
    module, _, name = classpath.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**kwargs)  # as the triggerer rebuilds it
    assert again.serialize() == (classpath, kwargs)
    assert kwargs["waited_s"] == 5.01 and kwargs["zone_conn_prefix"] == "z_"


def test_synced_once_no_zone_is_behind_and_the_probe_is_closed(monkeypatch):
    trigger = _trigger()
    probe = _scripted(monkeypatch, trigger, ScriptedProbe(["b", "c"], ["c"], []))
    (event,) = asyncio.run(_events(trigger))
    assert event["status"] == "synced" and probe.polls == 3 and probe.closed


def test_timeout_carries_the_zones_behind_and_counts_the_worker_s_wait(monkeypatch):
    trigger = _trigger(timeout_s=1.0, waited_s=0.95)
    probe = _scripted(monkeypatch, trigger, ScriptedProbe(["c"]))
    started = time.monotonic()
    (event,) = asyncio.run(_events(trigger))
    assert event["status"] == "timeout" and event["behind"] == ["c"]
    assert 1.0 <= event["waited_s"] < 1.5 and time.monotonic() - started < 0.5  # 0.95 s were already waited
    assert probe.closed


def test_cancelled_while_polling_closes_the_probe_after_the_poll(monkeypatch):
    trigger = _trigger()
    probe = _scripted(monkeypatch, trigger, ScriptedProbe(["b"], delay_s=0.2))

    async def main():
        task = asyncio.create_task(_events(trigger))
        await asyncio.sleep(0.05)  # inside the first poll's thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await trigger.cleanup()  # the triggerer calls it too, after run() ended

    asyncio.run(main())
    assert probe.closed and probe.polls == 1


def test_cleanup_closes_the_zone_connections():
    class Conn:
        closed = False

        def close(self):
            self.closed = True

    trigger = _trigger()
    probe = SyncProbe(SwitchContext(meta=None, run_id="r", params=None, zone_conn=None))
    probe.conns = {"b": Conn(), "c": Conn()}
    conns = list(probe.conns.values())
    trigger._probe = probe
    asyncio.run(trigger.cleanup())
    assert all(c.closed for c in conns) and probe.conns == {} and trigger._probe is None
    asyncio.run(trigger.cleanup())  # twice is harmless


def test_a_slow_poll_does_not_block_the_event_loop(monkeypatch):
    trigger = _trigger()
    _scripted(monkeypatch, trigger, ScriptedProbe(["b"], [], delay_s=0.3))

    async def main():
        gaps, last = [], time.monotonic()

        async def heartbeat():
            nonlocal last
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        events = await _events(trigger)
        beat.cancel()
        return events, max(gaps)

    events, worst_gap = asyncio.run(main())
    assert events[0]["status"] == "synced" and worst_gap < 0.15, worst_gap


def test_zone_connections_come_from_endpoints_with_timeouts(monkeypatch):
    """The probe asks every zone but from_zone, through Endpoint.connect (connect and read timeouts)."""
    import pymysql

    from zonesync.meta.store import MetaStore
    from zonesync_airflow.hooks.meta import ZonesyncMetaHook

    for zone, zone_id in (("a", 1), ("b", 2), ("c", 3)):
        conn = Connection(conn_id=f"zonesync_zone_{zone}", conn_type="mysql", host="h", port=3300 + zone_id,
                          login="app")  # fmt: skip
        conn.extra = json.dumps({"zone_id": zone_id})
        monkeypatch.setenv(f"AIRFLOW_CONN_ZONESYNC_ZONE_{zone.upper()}", conn.as_json())

    async def meta_config(self):
        return "meta"

    monkeypatch.setattr(ZonesyncMetaHook, "ameta_config", meta_config)
    monkeypatch.setattr(MetaStore, "zones", lambda self: {"c", "a", "b"})
    opened = []
    monkeypatch.setattr(pymysql, "connect", lambda **kw: opened.append(kw) or kw)

    probe = asyncio.run(_trigger()._open_probe())
    assert isinstance(probe, SyncProbe) and probe.ctx.params == SwitchParams("", "a", "b", "wait_sync")
    assert probe.ctx.run_id == "manual__1" and probe.ctx.meta == "meta"
    probe.ctx.zone_conn("c")
    (kw,) = opened
    assert (kw["host"], kw["port"], kw["autocommit"]) == ("h", 3303, True)
    assert kw["connect_timeout"] > 0 and kw["read_timeout"] > 0 and kw["write_timeout"] > 0
    with pytest.raises(KeyError):
        probe.ctx.zone_conn("a")  # from_zone is never asked
