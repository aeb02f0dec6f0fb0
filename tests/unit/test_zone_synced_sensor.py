"""ZoneSyncedSensor's three steps without zones: the wait in the worker, the deferral, and
the poke mode whose timeout is recognised by its type, never by its text.

The meta store and the zones are replaced by scripted answers; the real wait_sync
runs in tests/dags/test_zone_switch_dag.py and tests/integration/switch/test_switch_steps.py.
"""

from __future__ import annotations

import time

import pytest
from airflow.sdk.exceptions import TaskDeferred  # airflow first: its start imports the plugin

from zonesync.switch.steps import SwitchContext, SwitchParams

pytestmark = pytest.mark.unit

CTX = SwitchContext(meta=None, run_id="manual__1", params=SwitchParams("0-9", "a", "b", "test"), zone_conn=None)


class Behind:
    """behind() / behind_zones() answers from a script, the last one repeating."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = 0
        self.captured_after = 0.01

    def __call__(self, ctx=None):
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    behind = __call__

    # as SyncProbe(ctx): a context manager over the same script
    def probe(self, ctx):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.fixture
def sensor(monkeypatch):
    """A sensor whose meta records land in a list and whose P is already taken."""
    from zonesync_airflow.sensors import switch

    sensor = switch.ZoneSyncedSensor(task_id="wait_sync", poke_interval=0.01)
    sensor.records = []
    monkeypatch.setattr(sensor, "_record", lambda ctx, status, detail="": sensor.records.append((status, detail)))
    monkeypatch.setattr(sensor, "_take_position", lambda context: CTX)
    monkeypatch.setattr(switch, "switch_context", lambda context, meta_conn_id: CTX)
    return sensor


def _script(monkeypatch, *answers) -> Behind:
    from zonesync_airflow.sensors import switch

    script = Behind(*answers)
    monkeypatch.setattr(switch, "behind_zones", script)
    monkeypatch.setattr(switch, "SyncProbe", script.probe)
    return script


def _context(sync_timeout_s=120.0):
    return {"params": {"sync_timeout_s": sync_timeout_s}}


def test_poke_is_true_once_no_zone_is_behind(sensor, monkeypatch):
    _script(monkeypatch, ["b", "c"], ["c"], [])
    assert [sensor.poke(_context()) for _ in range(3)] == [False, False, True]


def test_the_usual_short_lag_ends_in_the_worker(sensor, monkeypatch):
    script = _script(monkeypatch, ["b"], ["b"], [])
    assert sensor.execute(_context()) is True
    assert script.calls == 3
    ((status, detail),) = sensor.records
    assert status == "ok" and detail.startswith("synced after") and detail.endswith("in the worker)")


def test_a_longer_lag_defers_to_the_trigger_with_the_time_already_waited(sensor, monkeypatch):
    from zonesync_airflow.triggers.switch import ZoneSyncedTrigger

    _script(monkeypatch, ["b"])
    sensor.inline_s = 0.1
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(_context(sync_timeout_s=30.0))
    trigger = deferred.value.trigger
    assert isinstance(trigger, ZoneSyncedTrigger) and deferred.value.method_name == "execute_complete"
    assert (trigger.run_id, trigger.from_zone, trigger.to_zone, trigger.timeout_s) == ("manual__1", "a", "b", 30.0)
    assert 0.1 <= trigger.waited_s < 1.0
    assert deferred.value.timeout.total_seconds() == 90.0  # backstop past the trigger's own timeout
    assert sensor.records == []


def test_the_worker_waits_no_longer_than_the_sync_timeout(sensor, monkeypatch):
    _script(monkeypatch, ["b"])
    sensor.inline_s = 60.0
    started = time.monotonic()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(_context(sync_timeout_s=0.1))
    assert time.monotonic() - started < 1.0 and deferred.value.trigger.waited_s >= 0.1


def test_the_trigger_s_events(sensor):
    from zonesync_airflow.sensors.switch import SyncTimeout

    assert sensor.execute_complete(_context(), {"status": "synced", "waited_s": 7.25}) is True
    assert sensor.records == [("ok", "synced after 7.2 s")]
    with pytest.raises(SyncTimeout, match=r"zones b, c did not apply zone a's stream up to P within 120 s"):
        sensor.execute_complete(_context(), {"status": "timeout", "behind": ["b", "c"], "waited_s": 120.4})
    assert sensor.records[-1][0] == "failed"


def test_poke_mode_succeeds_when_synced(sensor, monkeypatch):
    _script(monkeypatch, ["b"], ["b"], [])
    sensor.deferrable, sensor.inline_s = False, 0.0
    assert sensor.execute(_context()) is True
    assert sensor.records == [("ok", "synced")]


def test_poke_mode_timeout_is_a_failed_wait_sync(sensor, monkeypatch):
    from zonesync_airflow.sensors.switch import SyncTimeout

    _script(monkeypatch, ["c"])
    sensor.deferrable, sensor.inline_s = False, 0.0
    with pytest.raises(SyncTimeout, match="zones c did not apply") as failed:
        sensor.execute(_context(sync_timeout_s=0.05))
    assert type(failed.value.__context__).__name__ == "AirflowSensorTimeout"
    assert [status for status, _ in sensor.records] == ["failed"]


def test_poke_mode_an_error_that_says_timed_out_is_not_a_sync_timeout(sensor, monkeypatch):
    from zonesync_airflow.sensors import switch

    calls = []

    def broken(ctx):  # the poke fails; asked again (as a timeout's report would), it answers
        calls.append(ctx)
        if len(calls) == 1:
            raise ConnectionError("connection to the meta store timed out")
        return ["c"]

    monkeypatch.setattr(switch, "behind_zones", broken)
    sensor.deferrable, sensor.inline_s = False, 0.0
    with pytest.raises(ConnectionError, match="timed out"):  # retried by Airflow, not a rollback
        sensor.execute(_context())
    assert sensor.records == [] and len(calls) == 1
