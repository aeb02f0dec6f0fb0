"""Fixtures of the integration tests: baseline rules, guards, clean tables."""

from __future__ import annotations

import pytest

from tests.support.rules import rules_doc
from zonesync.dal import Guard, ZoneDB
from zonesync.meta import guards
from zonesync.meta.store import MetaStore


@pytest.fixture
def guard_env(meta, zones):
    """Baseline rules published, tables empty, no guard left registered afterwards."""
    for name in ("a", "b", "c"):
        with zones[name].connect("zonesync_app").cursor() as cur:
            cur.execute("DELETE FROM orders")
            cur.execute("DELETE FROM tenants")
    for g in guards.list_instances(meta):
        guards.forget(meta, g.instance_id, "test setup")
    MetaStore(meta).publish_rules(rules_doc(), "test baseline")
    started: list[Guard] = []

    def make(zone: str, period: float = 0.5, poll: float = 0.05, lease: float | None = None, meta_cfg=None, clock=None):
        db = ZoneDB("127.0.0.1", zones[zone].port, "root", "", "zonesync_app")
        g = Guard(meta_cfg or meta, zone, db, period=period, poll=poll, lease=lease, clock=clock).start()
        started.append(g)
        return g

    yield make
    for g in started:
        g.close()
    for g in guards.list_instances(meta):
        guards.forget(meta, g.instance_id, "test teardown")
