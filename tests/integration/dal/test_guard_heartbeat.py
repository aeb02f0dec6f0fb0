"""S000-08: each heartbeat carries the version the instance runs, so an ack lost on its way
to meta (the swap done, the ack's write not) is made good within one keepalive period,
not at the next version while a step waits for it; a heartbeat never moves it back."""

from __future__ import annotations

import pytest

from tests.support.background import wait_until
from tests.support.rules import rules_doc
from zonesync.meta import guards
from zonesync.meta.store import MetaStore

pytestmark = pytest.mark.integration


def _recorded(meta, instance_id: str) -> tuple[int, int]:
    """(version_applied, acks of it) as meta holds them for the instance."""
    with meta.connect().cursor() as cur:
        cur.execute("SELECT version_applied FROM guard_instances WHERE instance_id = %s", (instance_id,))
        (applied,) = cur.fetchone()
        cur.execute("SELECT COUNT(*) FROM guard_acks WHERE instance_id = %s AND version = %s", (instance_id, applied))
        return int(applied), int(cur.fetchone()[0])


def test_a_lost_ack_is_made_good_by_the_next_heartbeat(guard_env, meta):
    guard = guard_env("a", period=0.3)
    version = MetaStore(meta).publish_rules(rules_doc(), "test: a version to ack")
    guards.wait_acks(meta, version, {"a"}, 5)
    assert guard.state.version == version
    # the ack lost: meta holds the instance at the version before, without its ack row
    meta.run("UPDATE guard_instances SET version_applied = %s WHERE instance_id = %s", (version - 1, guard.instance_id))
    meta.run("DELETE FROM guard_acks WHERE instance_id = %s AND version = %s", (guard.instance_id, version))
    assert _recorded(meta, guard.instance_id)[0] == version - 1
    waited = guards.wait_acks(meta, version, {"a"}, 3)  # no new version is published meanwhile
    assert waited < 3 and _recorded(meta, guard.instance_id) == (version, 1)
    # a recorded version above the one it runs (a newer ack in flight) is never moved back
    meta.run("UPDATE guard_instances SET version_applied = %s WHERE instance_id = %s", (version + 5, guard.instance_id))
    before = guards.list_instances(meta, {"a"})[0].last_heartbeat
    wait_until(lambda: guards.list_instances(meta, {"a"})[0].last_heartbeat != before, 3, "a heartbeat")
    assert _recorded(meta, guard.instance_id)[0] == version + 5
