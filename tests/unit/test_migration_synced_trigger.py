"""MigrationSyncedTrigger on its own, with scripted reads: a poll whose read fails (meta
or the target unreachable, its kept connection killed) is never taken for synced; the
connection is dropped and made again at the next poll, and a timeout names the last
failed read. The real wait against real zones, its reads failing mid-poll, runs in
tests/dags/test_le_migration_dag.py (S004-21)."""

from __future__ import annotations

import asyncio
import importlib
import json

import pymysql
import pytest
from airflow.sdk import Connection  # noqa: F401 - airflow first: its start imports the plugin

from zonesync.meta.db import MetaError

pytestmark = pytest.mark.unit


class Conn:
    def __init__(self, n: int):
        self.n, self.closed, self.commits = n, False, 0

    def commit(self):
        self.commits += 1

    def close(self):
        self.closed = True


class Endpoint:
    def __init__(self, refuse: int = 0):
        self.conns: list[Conn] = []
        self.refuse = refuse  # the first `refuse` connects fail (the target unreachable)

    def connect(self):
        if self.refuse:
            self.refuse -= 1
            raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1' (111)")
        self.conns.append(Conn(len(self.conns)))
        return self.conns[-1]


def _trigger(monkeypatch, answers, endpoint=None, **kw):
    """A trigger whose polls answer from `answers` (a bool, or an exception raised by the
    read; the last repeats), on `endpoint`'s connections."""
    from zonesync.apply.tools import progress
    from zonesync_airflow.hooks.meta import ZonesyncMetaHook
    from zonesync_airflow.hooks.zone import ZoneHook
    from zonesync_airflow.triggers.migration import MigrationSyncedTrigger

    endpoint = endpoint or Endpoint()
    polls: list = []

    async def meta_config(self):
        return "meta"

    async def aendpoint(self):
        return endpoint

    def is_applied(meta, conn, source_zone, position):
        assert (meta, source_zone, position) == ("meta", "a", ("binlog.000007", 1234))
        assert not conn.closed, "polled on a closed connection"
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        polls.append((conn.n, answer))
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(ZonesyncMetaHook, "ameta_config", meta_config)
    monkeypatch.setattr(ZoneHook, "aendpoint", aendpoint)
    monkeypatch.setattr(progress, "is_applied", is_applied)
    args = {"run_id": "manual__1", "source_zone": "a", "target_zone": "b", "position": ["binlog.000007", 1234],
            "timeout_s": 5.0, "poll_interval": 0.01}  # fmt: skip
    return MigrationSyncedTrigger(**{**args, **kw}), endpoint, polls


async def _events(trigger):
    return [e.payload async for e in trigger.run()]


def test_serialize_round_trips():
    from zonesync_airflow.triggers.migration import MigrationSyncedTrigger

    trigger = MigrationSyncedTrigger("manual__1", "a", "b", ["binlog.000007", 1234], 120.0, waited_s=5.01)
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)
    module, _, name = classpath.rpartition(".")
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (classpath, kwargs)


def test_a_read_that_fails_mid_poll_is_not_synced_and_the_next_poll_connects_again(monkeypatch):
    """The kept connection killed (2013), then meta unreachable: neither poll says synced;
    each drops the connection, the next one makes a new one; synced once a read says so."""
    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    meta_down = MetaError("meta store 127.0.0.1:3307 unreachable: Connection refused")
    trigger, endpoint, polls = _trigger(monkeypatch, [False, lost, meta_down, False, True])
    (event,) = asyncio.run(_events(trigger))
    assert event["status"] == "synced"
    assert polls == [(0, False), (0, lost), (1, meta_down), (2, False), (2, True)]
    assert [c.closed for c in endpoint.conns] == [True, True, True]  # dropped twice, the last closed at the end
    assert trigger.failed is None  # the last read succeeded


def test_a_target_unreachable_when_the_wait_starts_is_asked_again(monkeypatch):
    trigger, endpoint, polls = _trigger(monkeypatch, [True], Endpoint(refuse=3))
    (event,) = asyncio.run(_events(trigger))
    assert event["status"] == "synced" and polls == [(0, True)] and endpoint.conns[0].closed


def test_reads_that_keep_failing_time_out_naming_the_last_failure(monkeypatch):
    """Never synced on a failed read, however long it lasts: the timeout says why it could not tell."""
    trigger, endpoint, polls = _trigger(monkeypatch, [False, MetaError("meta store unreachable: refused")],
                                        timeout_s=0.3)  # fmt: skip
    (event,) = asyncio.run(_events(trigger))
    assert event["status"] == "timeout" and event["waited_s"] >= 0.3
    assert event["failed"] == "MetaError: meta store unreachable: refused"
    assert len(polls) > 3 and all(c.closed for c in endpoint.conns)


def test_an_error_that_is_no_outage_still_fails_the_trigger(monkeypatch):
    """A bug or a missing table is not retried as a blip: the trigger fails (the task's retries decide)."""
    trigger, endpoint, _ = _trigger(monkeypatch, [pymysql.err.ProgrammingError(1146, "Table doesn't exist")])
    with pytest.raises(pymysql.err.ProgrammingError):
        asyncio.run(_events(trigger))
    assert endpoint.conns[0].closed


def test_polled_after_cleanup_raises(monkeypatch):
    trigger, _, _ = _trigger(monkeypatch, [False])
    asyncio.run(trigger.cleanup())
    with pytest.raises(RuntimeError, match="after cleanup"):
        trigger._applied("meta")


def test_the_cutover_fails_on_a_timeout_naming_the_read_that_kept_failing(monkeypatch):
    """execute_complete: the trigger's timeout fails the cutover for good (the rollback
    follows), the run's reason naming the last failed read."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from zonesync_airflow.operators import migration as op

    noted = []
    store = SimpleNamespace(require=lambda run_id: SimpleNamespace(source_zone="a", target_zone="b"),
                            note_failure=lambda run_id, step, text: noted.append((run_id, step, text)))  # fmt: skip
    monkeypatch.setattr(op, "migration_context", lambda context, meta_conn_id: SimpleNamespace(run_id="r", store=store))
    cutover = op.ZoneMigrationCutoverOperator(task_id="cutover")
    with pytest.raises(AirflowFailException, match="^synced: zone b did not apply zone a's stream up to P within 60 s"):
        cutover.execute_complete({}, {"status": "timeout", "waited_s": 60.2, "failed": "MetaError: refused"})
    assert noted == [("r", "synced", "zone b did not apply zone a's stream up to P within 60 s: is its applier "
                      "running? (`zonesync lag`); the last poll could not read: MetaError: refused")]  # fmt: skip
