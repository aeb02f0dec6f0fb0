"""S000-48: loop suppression does not depend on current ownership.

The seed's receiver-side rule (Zone C 判断这条数据应该由 Zone A 写入，但是 binlog 是 Zone B
同步过来的，也会忽略) judges an event against the rules as they are when it arrives. Here
A's changes to ZSIDs 7-9 are still in flight to B and C (their appliers stopped) when
ownership of those ZSIDs passes to B (new rules published through meta, the guards
acking them); B then applies them and updates the same rows. When C's applier starts it
applies A's late events, then B's updates: every zone ends with the same rows and
versions, nothing is locked, and nothing is dropped because A no longer owns the ZSIDs.
No zone forwards what it applied (the filter is by session, capture side).

The second test takes the other arrival order in C (B's updates before A's late events),
which a plain restart of C's applier produces now and then: B's updates wait in C until
A's late versions arrive (their old rows are newer than C's rows), then land.
"""

from __future__ import annotations

import threading
import time

import pytest
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from tests.support import binlog
from tests.support.replication import alerts, checksum, wait_converged
from tests.support.rules import rules_doc
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.loop.applier import Applier
from zonesync.dal.errors import WrongZone
from zonesync.meta import guards

pytestmark = pytest.mark.integration

MOVED = [
    {"zsids": "0-99", "zone": "b"},
    {"zsids": "100-399", "zone": "a"},
    {"zsids": "400-799", "zone": "b"},
    {"zsids": "800-1023", "zone": "c"},
]


def _rows(inst) -> dict[int, tuple]:
    """tenant_id -> (name, _zs_origin, _zs_version)."""
    return {r[0]: (r[1], r[3], r[4]) for r in checksum(inst)}


def _wait_rows(inst, expected: dict, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while _rows(inst) != expected:
        assert time.monotonic() < deadline, f"{what}: {_rows(inst)} != {expected}"
        time.sleep(0.05)


def _wait_published(replicator, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while replicator.published < count:
        assert time.monotonic() < deadline, f"replicator published {replicator.published} events, not {count}"
        time.sleep(0.05)


def _tenant_images(inst, start, tenant: int) -> list[tuple[str, int, int]]:
    """(name, origin, version) of every row image written for `tenant` in the zone's binlog
    since `start`, in binlog order."""
    stream = binlog.open_stream(inst, start, 6048, [WriteRowsEvent, UpdateRowsEvent])
    out = []
    try:
        for ev in stream:
            if ev.table != "tenants":
                continue
            for row in ev.rows:
                image = row.get("after_values", row.get("values"))
                if image["tenant_id"] == tenant:
                    out.append((image["name"], image["_zs_origin"], image["_zs_version"]))
    finally:
        stream.close()
    return out


def _applier(cluster, zone: str, sources: list[str]) -> Applier:
    """An applier of `zone` that reads only `sources`' streams."""
    inst = cluster.zones[zone]
    return Applier(
        zone,
        sources,
        lambda: ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app"),
        cluster.meta,
        partitions=cluster.partitions,
        bootstrap=cluster.bootstrap,
        topic_of=cluster.apply_topic,
    )


def _catch_up(cluster, zone: str, sources: list[str], done, what: str, timeout: float = 15.0) -> Applier:
    """Run an applier of `zone` reading only `sources` until `done()`, then stop it."""
    applier = _applier(cluster, zone, sources)
    runner = threading.Thread(target=applier.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)
    finally:
        applier.stop()
        runner.join(20)
    assert not runner.is_alive(), f"the applier of {zone} did not stop"
    return applier


def _late_events_in_flight(cluster, guard_env, zones, meta):
    """A's last writes to ZSIDs 7-9 (an update, a delete, an insert) are in flight to b and c
    when the ZSIDs pass to b; b applies them, then updates 7 and 9. c's applier is still
    stopped. Returns (a's rows after its late writes, b's rows after its updates, where c's
    binlog stood before any of it)."""
    ga, gb = guard_env("a"), guard_env("b")
    guard_env("c")
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "born 7"})
        tx.insert("tenants", {"tenant_id": 8, "name": "born 8"})
    wait_converged(zones, ("tenants",))
    _wait_published(cluster.replicators["a"], 2)

    cluster.stop("applier-b")
    cluster.stop("applier-c")
    conn = zones["c"].connect()
    c_start = binlog.position(conn)
    conn.close()
    with ga.transaction() as tx:
        assert tx.update("tenants", {"tenant_id": 7}, {"name": "a late 7"})
        assert tx.delete("tenants", {"tenant_id": 8}) == 1
        tx.insert("tenants", {"tenant_id": 9, "name": "a late 9"})
    _wait_published(cluster.replicators["a"], 5)
    after_a = _rows(zones["a"])
    assert set(after_a) == {7, 9}

    guards.push_and_wait(meta, rules_doc(MOVED), "S000-48: ZSIDs 0-99 pass to b")
    with pytest.raises(WrongZone):  # ownership has passed: a no longer writes them
        with ga.transaction() as tx:
            tx.update("tenants", {"tenant_id": 7}, {"name": "a too late"})

    # b, now the owner, still applies a's late events (before it writes, as a switch's sync would have it)
    cluster.start(which=("applier",), zones=("b",))
    _wait_rows(zones["b"], after_a, "b applies a's late events for ZSIDs it now owns")
    with gb.transaction() as tx:
        assert tx.update("tenants", {"tenant_id": 7}, {"name": "b owns 7"})
        assert tx.update("tenants", {"tenant_id": 9}, {"name": "b owns 9"})
    after_b = _rows(zones["b"])
    assert {t: r[0] for t, r in after_b.items()} == {7: "b owns 7", 9: "b owns 9"}
    assert all(after_b[t][2] > after_a[t][2] for t in (7, 9)), "b's updates are newer versions"
    _wait_rows(zones["a"], after_b, "a applies b's updates of the rows it gave up")
    assert any(_applied(zones["a"], "b").values()), "a recorded where it stands in b's stream"
    _wait_published(cluster.replicators["b"], 2)
    return after_a, after_b, c_start


def test_late_event_of_the_old_owner_is_applied_after_ownership_moved(cluster, guard_env, zones, meta):
    """S000-48: c's applier starts with a's late events and b's updates both waiting in the
    broker; it applies a's (the rules now say b owns those ZSIDs), then b's."""
    after_a, after_b, c_start = _late_events_in_flight(cluster, guard_env, zones, meta)

    # a's stream first (the order a switch's sync guarantees; see the next test for the other)
    first = _catch_up(cluster, "c", ["a"], lambda: _rows(zones["c"]) == after_a, "c applies a's late events")
    assert first.applied == 3, "a's update, delete and insert: none dropped for the ZSIDs' new owner"
    cluster.start(which=("applier",), zones=("c",))
    sums = wait_converged(zones, ("tenants",))
    assert sums["tenants"]["a"] == sums["tenants"]["b"] == sums["tenants"]["c"]
    assert _rows(zones["c"]) == after_b
    assert _tenant_images(zones["c"], c_start, 7) == [after_a[7], after_b[7]], "a's late update of 7, then b's"
    assert _tenant_images(zones["c"], c_start, 9) == [after_a[9], after_b[9]], "a's late insert of 9, then b's update"
    with zones["c"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
        assert cur.fetchone()[0] == 0, "nothing locked in c"
    assert alerts(meta, "c", "row_locked") == [] and alerts(meta, "c", "partition_halted") == []
    deadline = time.monotonic() + 5
    while cluster.appliers["c"].applied < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.appliers["c"].applied == 2, "b's two updates, once each"
    # no loops: each replicator published its own zone's writes only, never what it applied
    time.sleep(0.5)
    assert cluster.replicators["a"].published == 5
    assert cluster.replicators["b"].published == 2
    assert cluster.replicators["c"].published == 0


def test_new_owners_update_reaching_c_before_the_late_event_still_converges(cluster, guard_env, zones, meta):
    """S000-48, the other arrival order: c's applier takes b's updates first (as a plain
    restart of c does now and then: the order of two sources' fetches is not fixed), then a's
    late events. b's updates find c's rows behind their old rows (a's late versions have not
    arrived): they wait, their partitions stopped, nothing locked (decide.py, "Waiting").
    Once c reads a's stream too, a's late events land, then b's: c ends with b's rows."""
    after_a, after_b, _ = _late_events_in_flight(cluster, guard_env, zones, meta)
    before = _rows(zones["c"])
    assert before == {7: before[7], 8: before[8]} and before[7][0] == "born 7"

    b_only = _applier(cluster, "c", ["b"])
    runner = threading.Thread(target=b_only.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 15
        while not b_only.stopped:
            assert time.monotonic() < deadline, "b's updates wait in c for a's late versions"
            time.sleep(0.05)
        time.sleep(1.0)  # retried serially meanwhile: still waiting, still nothing written or locked
        assert b_only.stopped
        assert _rows(zones["c"]) == before, "neither of b's updates landed over rows behind their old rows"
    finally:
        b_only.stop()
        runner.join(20)
    assert not runner.is_alive()
    assert alerts(meta, "c", "row_locked") == []

    cluster.start(which=("applier",), zones=("c",))
    sums = wait_converged(zones, ("tenants",), timeout=20)
    assert _rows(zones["c"]) == after_b
    assert sums["tenants"]["a"] == sums["tenants"]["b"] == sums["tenants"]["c"]
    assert alerts(meta, "c", "row_locked") == [] and alerts(meta, "c", "partition_halted") == []
    with zones["c"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
        assert cur.fetchone()[0] == 0, "nothing locked in c"


def _applied(inst, source: str) -> dict[int, int]:
    """partition -> the LSN of `source`'s stream the zone's applier recorded as applied."""
    with inst.connect().cursor() as cur:
        cur.execute("SELECT partition_no, applied_lsn FROM zonesync.apply_state WHERE source_zone = %s", (source,))
        return {int(p): int(lsn) for p, lsn in cur.fetchall()}
