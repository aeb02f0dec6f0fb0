"""The migration's stop-write gate (migrate/gate.py, S004-15), the pure parts: the window,
and MigrationGateTrigger's events with the gate's answers scripted. The gate against a
real meta store's lag reports: tests/integration/migrate/test_migration_steps.py."""

from __future__ import annotations

import asyncio
import datetime
import importlib

import pytest
from airflow.sdk import Connection  # noqa: F401  (airflow first: its start imports the plugin)

from zonesync.migrate import gate

pytestmark = pytest.mark.unit


def _at(hh: int, mm: int) -> datetime.datetime:
    return datetime.datetime(2026, 11, 27, hh, mm, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("window", "inside", "outside"),
    [("02:00-04:30", [(2, 0), (4, 29)], [(1, 59), (4, 30), (12, 0)]),
     ("22:00-03:00", [(22, 0), (23, 59), (0, 0), (2, 59)], [(3, 0), (21, 59), (12, 0)]),
     ("", [(0, 0), (12, 0)], [])],
)  # fmt: skip
def test_the_window_is_utc_minutes_and_may_wrap_midnight(window, inside, outside):
    parsed = gate.parse_window(window)
    assert all(gate.in_window(parsed, _at(*t)) for t in inside)
    assert not any(gate.in_window(parsed, _at(*t)) for t in outside)


@pytest.mark.parametrize(("text", "words"), [("2:00-4:00", "is not HH:MM-HH:MM"), ("02:00-02:00", "is empty"),
                                             ("24:00-01:00", "is not HH:MM-HH:MM")])  # fmt: skip
def test_a_bad_window_is_one_line_naming_the_field(text, words):
    with pytest.raises(gate.GateSpecError, match=f"^stop_window_utc: '{text}' {words}"):
        gate.parse_window(text)


class FakeMeta:
    """apply_lag rows as (behind_seconds, fresh) (a pure unit: the SQL's answer scripted)."""

    def __init__(self, rows):
        self.rows = rows

    def run(self, sql, args):
        assert "FROM apply_lag" in sql and args[1:] == ("a", "b")
        return self.rows, 0


@pytest.mark.parametrize(
    ("rows", "words"),
    [([(0.2, 1), (1.0, 1)], None), ([(0.2, 1), (7.5, 1)], "zone b lags zone a by 7.5 s (more than max_lag_s 5)"),
     ([(0.2, 1), (0.0, 0)], "has no fresh lag report"), ([], "has no fresh lag report")],
)  # fmt: skip
def test_the_gate_opens_only_when_every_partition_reports_keeping_up(rows, words):
    why = gate.closed_because(FakeMeta(rows), "a", "b", 5.0, "", _at(12, 0))
    assert why == words if words is None else words in why
    assert gate.closed_because(FakeMeta(rows), "a", "b", 5.0, "02:00-04:00", _at(12, 0)).startswith(
        "outside the stop-write window 02:00-04:00 UTC (now 12:00 UTC)"
    )


def _trigger(**kw):
    from zonesync_airflow.triggers.migration import MigrationGateTrigger

    args = {"run_id": "manual__1", "source_zone": "a", "target_zone": "b", "max_lag_s": 5.0, "window": "",
            "timeout_s": 0.3, "poll_interval": 0.01}  # fmt: skip
    return MigrationGateTrigger(**{**args, **kw})


def _scripted(monkeypatch, answers: list):
    from zonesync_airflow.triggers import migration

    async def meta_config(self):
        return object()

    def closed_because(meta, *args):
        return answers.pop(0) if len(answers) > 1 else answers[0]

    monkeypatch.setattr(migration.ZonesyncMetaHook, "ameta_config", meta_config)
    monkeypatch.setattr(gate, "closed_because", closed_because)


async def _events(trigger):
    return [e.payload async for e in trigger.run()]


def test_the_gate_trigger_serializes_and_reports_open_or_timeout_with_its_reason(monkeypatch):
    trigger = _trigger()
    path, kwargs = trigger.serialize()
    module, name = path.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs)
    _scripted(monkeypatch, ["lags", "lags", None])
    (opened,) = asyncio.run(_events(_trigger()))
    assert opened["status"] == "open"
    _scripted(monkeypatch, ["zone b lags zone a by 9.0 s"])
    (late,) = asyncio.run(_events(_trigger()))
    assert late["status"] == "timeout" and late["why"] == "zone b lags zone a by 9.0 s" and late["waited_s"] >= 0.3
