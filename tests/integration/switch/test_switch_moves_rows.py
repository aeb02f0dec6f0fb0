"""Rows of moved ZSIDs during a real switch (a -> b of ZSIDs 0-99), with replication,
guards and the switch steps all real.

S000-40 (切换 zone 的时候数据复制; 新增/删除/更新): zone a inserts, updates and deletes rows
of the moved ZSIDs until BLOCK refuses it; at the moment b's guard accepts its first write
to a moved ZSID, every one of those rows (and every delete) is already in b and c, as a
has them; that first write, an update of a row a wrote, passes the old-row check in a and c.

S000-41: a deletes a row of a moved ZSID before the switch; after activate b inserts a row
with the same primary key: its version outranks the tombstone in every zone, so it lands in
a, b and c, while the tombstone still stops what is older (a's old insert, resent, revives
neither the deleted row before the switch nor overwrites b's row after it).
"""

from __future__ import annotations

import time
from collections import Counter

import msgspec
import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.background import Background, wait_until
from tests.support.replication import ZONES, checksum, wait_converged
from tests.support.switching import context, run_switch, wait_replication_reported
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.dal import ZoneReshardingBlocked
from zonesync.dal.errors import WriteRefused, WrongZone
from zonesync.events import INSERT, ChangeEvent, decode_message
from zonesync.switch.store import SwitchStore

pytestmark = pytest.mark.integration

CYCLING = list(range(10, 20))  # inserted, updated twice, deleted, inserted again ... until BLOCK
GONE = [40, 41]  # inserted, updated, deleted, and left deleted
KEPT = 30  # inserted, then updated until BLOCK: b's first write updates it


@pytest.fixture
def switching(cluster, guard_env, meta, zones):
    wait_replication_reported(meta)
    yield
    for holder, *_ in SwitchStore(meta).leases():
        SwitchStore(meta).release_lease(holder)


def _moved_rows(inst) -> tuple:
    """The zone's rows of moved ZSIDs: (tenant_id, name, _zs_origin, _zs_version)."""
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT tenant_id, name, _zs_origin, _zs_version FROM tenants WHERE tenant_id < 100 ORDER BY 1")
        return tuple(cur.fetchall())


def _row_locks(inst) -> int:
    with inst.connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.row_locks")
        return cur.fetchone()[0]


class AWrites(Background):
    """Zone a's writes to moved ZSIDs, each tenant following its script, until stopped;
    `final` is what a's accepted writes left (tenant -> name, None once deleted)."""

    name = "a-writes"

    def __init__(self, guard):
        super().__init__()
        self.guard = guard
        self.step = Counter()
        self.final: dict[int, str | None] = {}
        self.ops: Counter = Counter()
        self.refusals: list[Exception] = []
        self.errors: list[Exception] = []

    @staticmethod
    def _op(tenant: int, step: int) -> str | None:
        if tenant == KEPT:
            return "insert" if step == 0 else "update"
        if tenant in GONE:
            return ("insert", "update", "delete")[step] if step < 3 else None
        return ("insert", "update", "update", "delete")[step % 4]

    def _write(self, tenant: int) -> None:
        op = self._op(tenant, self.step[tenant])
        if op is None:
            return
        name = f"a{self.step[tenant]}"
        with self.guard.transaction() as tx:
            if op == "insert":
                tx.insert("tenants", {"tenant_id": tenant, "name": name})
            elif op == "update":
                assert tx.update("tenants", {"tenant_id": tenant}, {"name": name}) == 1
            else:
                assert tx.delete("tenants", {"tenant_id": tenant}) == 1
        self.step[tenant] += 1
        self.ops[op] += 1
        self.final[tenant] = None if op == "delete" else name

    def _run(self) -> None:
        while not self._stop.is_set():
            for tenant in [KEPT, *GONE, *CYCLING]:
                try:
                    self._write(tenant)
                except WriteRefused as exc:  # BLOCK, then not a's; or a deadline passed: not written
                    self.refusals.append(exc)
                except Exception as exc:  # noqa: BLE001 - reported by the test
                    self.errors.append(exc)
            self._stop.wait(0.005)

    def expected(self) -> dict[int, str]:
        return {t: name for t, name in self.final.items() if name is not None}


class BFirstWrite(Background):
    """Zone b tries to update tenant KEPT until its guard accepts; once it has (the update
    done, not yet committed), it records every zone's rows of the moved ZSIDs, then commits."""

    name = "b-first-write"

    def __init__(self, guard, zones):
        super().__init__()
        self.guard = guard
        self.zones = zones
        self.refusals = 0
        self.changed: int | None = None
        self.at_first_write: dict[str, tuple] | None = None
        self.error: Exception | None = None

    def _run(self) -> None:
        while not self._stop.is_set() and self.at_first_write is None and self.error is None:
            try:
                with self.guard.transaction() as tx:
                    changed = tx.update("tenants", {"tenant_id": KEPT}, {"name": "b's first"})
                    # b's guard accepted it: what every zone holds of the moved ZSIDs right now
                    seen = {z: _moved_rows(self.zones[z]) for z in ZONES}
                self.changed, self.at_first_write = changed, seen
            except (ZoneReshardingBlocked, WrongZone):
                self.refusals += 1
            except WriteRefused:  # (a deadline passed under load: nothing written, try again)
                pass
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.error = exc
            self._stop.wait(0.005)


def test_rows_written_in_a_up_to_block_are_in_b_and_c_at_bs_first_write(switching, guard_env, meta, zones):
    ga, gb = guard_env("a", period=0.2), guard_env("b", period=0.2)
    with AWrites(ga) as writes:
        wait_until(lambda: writes.ops["delete"] >= 6 and all(writes.final.get(t, "") is None for t in GONE),
                   20, "a inserted, updated and deleted moved rows")  # fmt: skip
        with BFirstWrite(gb, zones) as first:
            run_switch(context(meta, zones))
            wait_until(lambda: first.at_first_write is not None or first.error is not None, 30, "b's first write")
    assert writes.errors == [] and first.error is None, (writes.errors, first.error)
    assert any(isinstance(e, ZoneReshardingBlocked) for e in writes.refusals), "a was writing when BLOCK came"
    assert all(writes.ops[op] > 0 for op in ("insert", "update", "delete")), writes.ops
    assert first.refusals > 0, "b was refused until activate: its accepted write was its first"

    seen = first.at_first_write
    expected_a = writes.expected()
    assert {r[0]: r[1] for r in seen["a"]} == expected_a, "a's rows are those of its accepted writes"
    assert all(r[2] == 1 for r in seen["a"]), "written by a"
    assert set(GONE) & {r[0] for r in seen["a"]} == set(), "deleted rows stay deleted"
    assert seen["b"] == seen["a"], "b had a's rows (and deletes) of the moved ZSIDs at its first write"
    assert seen["c"] == seen["a"], "c had them too"
    assert first.changed == 1, "b's first write found the row it updates"

    last_a = next(r for r in seen["a"] if r[0] == KEPT)
    sums = wait_converged(zones, ("tenants",))
    for z in ZONES:
        row = next(r for r in sums["tenants"][z] if r[0] == KEPT)
        assert (row[1], row[3]) == ("b's first", 2) and row[4] > last_a[3], f"zone {z}: {row}"
        assert _row_locks(zones[z]) == 0, f"zone {z} locked a row: b's update did not pass its old-row check"


def _insert_event(cluster, tenant: int) -> ChangeEvent:
    """Zone a's published insert of the tenant, read back from a's topic."""
    topic = cluster.topic("a")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "s000-41", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(cluster.partitions)])
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            for event in decode_message(msg.value()):
                if event.table == "tenants" and event.pk == {"tenant_id": tenant} and event.op == INSERT:
                    return event
    finally:
        consumer.close()
    raise AssertionError(f"a's insert of tenant {tenant} is not in its topic")


def _tombstone(inst, tenant: int) -> int | None:
    with inst.connect().cursor() as cur:
        cur.execute(
            "SELECT version FROM zonesync.tombstones WHERE table_name = 'tenants' AND pk = %s", (f"[{tenant}]",)
        )
        row = cur.fetchone()
        return row[0] if row else None


def _resend(zones, zone: str, event: ChangeEvent):
    """The event applied again into the zone by the applier's writer (as a resend would bring
    it), without moving any position."""
    writer = ZoneWriter("127.0.0.1", zones[zone].port, "root", "", "zonesync_app")
    try:
        return writer.apply_many([("a", [msgspec.structs.replace(event, is_retry=True)])], [])
    finally:
        writer.close()


def _applied_from_a(inst) -> int:
    with inst.connect().cursor() as cur:
        cur.execute("SELECT COALESCE(SUM(applied_lsn), 0) FROM zonesync.apply_state WHERE source_zone = 'a'")
        return int(cur.fetchone()[0])


def test_a_key_deleted_in_a_before_the_switch_is_inserted_again_by_b(switching, cluster, guard_env, meta, zones):
    ga, gb = guard_env("a", period=0.2), guard_env("b", period=0.2)
    with ga.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "born in a"})
    with ga.transaction() as tx:
        tx.update("tenants", {"tenant_id": 7}, {"name": "a's last"})
    wait_converged(zones, ("tenants",))
    last_version = checksum(zones["a"])[0][4]
    with ga.transaction() as tx:
        assert tx.delete("tenants", {"tenant_id": 7}) == 1
    wait_until(lambda: all(_tombstone(zones[z], 7) is not None for z in ZONES), 20, "the delete reached b and c")
    sums = wait_converged(zones, ("tenants",))
    assert all(sums["tenants"][z] == () for z in ZONES)
    tombstones = {z: _tombstone(zones[z], 7) for z in ZONES}
    assert tombstones == {z: last_version + 1 for z in ZONES}, "a's guard and b's and c's appliers: the same tombstone"

    # before the switch: a's old insert, resent, does not bring the deleted row back
    old_insert = _insert_event(cluster, 7)
    assert old_insert.version < last_version + 1
    result = _resend(zones, "c", old_insert)
    assert (result.applied, result.skipped) == (0, 1)
    assert checksum(zones["c"]) == ()

    run_switch(context(meta, zones))
    with gb.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 7, "name": "reborn in b"})
    reborn = checksum(zones["b"])[0]
    assert reborn[4] > tombstones["b"], "b's insert outranks the tombstone b's applier wrote"
    sums = wait_converged(zones, ("tenants",))
    for z in ZONES:
        assert [(r[0], r[1], r[3], r[4]) for r in sums["tenants"][z]] == [(7, "reborn in b", 2, reborn[4])], z
        assert _row_locks(zones[z]) == 0, f"zone {z} locked the reborn row"

    # after it: the tombstone and b's row still stop everything older
    for z in ("b", "c"):
        result = _resend(zones, z, old_insert)
        assert (result.applied, result.skipped) == (0, 1), z
    # and a's whole stream replayed into c from the start of a's topic (c forgot its position)
    applied_before = _applied_from_a(zones["c"])
    cluster.stop("applier-c")
    with zones["c"].connect().cursor() as cur:
        cur.execute("DELETE FROM zonesync.apply_state WHERE source_zone = 'a'")
    cluster.start(which=("applier",), zones=("c",))
    wait_until(lambda: _applied_from_a(zones["c"]) == applied_before, 30, "c read a's stream again to its end")
    assert cluster.appliers["c"].applied == 0, "every replayed event of a is older than what c holds"
    assert {z: checksum(zones[z]) for z in ZONES} == sums["tenants"]
    assert all(_row_locks(zones[z]) == 0 for z in ZONES)
