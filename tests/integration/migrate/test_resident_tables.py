"""Resident tables (docs/migration.md, "Resident tables"): rows that live only in their
tenant's unit, kept out of the mesh, and moved with the tenant by a migration (admit,
stock copy on Spark, the stream, the cutover, release; rollback purges the target)."""

from __future__ import annotations

import datetime
import threading
import time

import pytest

from tests.support.background import wait_until
from tests.support.replication import ZONES, alerts
from tests.support.resident import note_ids, note_rows, server_time_zones
from zonesync.apply.batch.resident import HEAD
from zonesync.apply.tools.progress import is_applied
from zonesync.capture.binlog import binlog_end
from zonesync.dal import EntityWriteStopped, WrongZone
from zonesync.meta import guards
from zonesync.meta.entities import EntityRegistry
from zonesync.migrate import resident, steps
from zonesync.migrate.request import MigrationRefused, MigrationRequest

pytestmark = pytest.mark.integration


def _applied_everywhere(meta, zones, source: str = "a", timeout: float = 60) -> None:
    """Every other zone applied `source`'s stream up to its binlog's end now."""
    with zones[source].connect() as conn:
        position = binlog_end(conn)
    for z in ZONES:
        if z != source:
            with zones[z].connect("zonesync_app") as conn:
                wait_until(lambda conn=conn: is_applied(meta, conn, source, position), timeout, f"{z} applied {source}")


def _note(guard, note_id: int, tenant: int, body: str = "x") -> None:
    with guard.transaction() as tx:
        tx.insert("notes", {"note_id": note_id, "tenant_id": tenant, "body": body})


def _ctx(zones, meta, run_id: str, to: str = "b") -> steps.MigrationContext:
    return steps.MigrationContext(meta, run_id, MigrationRequest("tenant", "7", to, "plan1", "test"),
                                  lambda z: zones[z].connect("zonesync_app"), actor="test", max_txn_ms=200)  # fmt: skip


def test_resident_rows_stay_in_their_unit_and_an_admitted_entity_s_changes_follow_the_stream(
    notes, cluster, guard_env, zones, meta
):
    """Notes written in a reach no other zone; once b admits tenant 7 from a, b applies
    tenant 7's changes (an update of a row b never had lands whole, a delete leaves a
    tombstone) and still nothing of tenant 8's; withdrawn, b takes no more."""
    ga = guard_env("a")
    for n in range(1, 6):
        _note(ga, n, 7)
    _note(ga, 100, 8)
    _applied_everywhere(meta, zones)
    assert note_ids(zones["a"]) == {1, 2, 3, 4, 5, 100}
    assert note_ids(zones["b"]) == note_ids(zones["c"]) == set()
    with zones["b"].connect("zonesync_app") as conn:
        resident.admit(conn, "adm-7", "a", [("tenant", "7")])
    with ga.transaction() as tx:
        tx.update("notes", {"note_id": 1}, {"body": "changed"})
        tx.delete("notes", {"note_id": 2})
        tx.insert("notes", {"note_id": 6, "tenant_id": 7, "body": "new"})
        tx.insert("notes", {"note_id": 106, "tenant_id": 8, "body": "new"})
    _applied_everywhere(meta, zones)
    assert note_ids(zones["b"]) == {1, 6} and note_ids(zones["c"]) == set()
    with zones["b"].connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SELECT body FROM notes WHERE note_id = 1")
        assert cur.fetchone()[0] == "changed"
        cur.execute("SELECT COUNT(*) FROM zonesync.tombstones WHERE table_name = 'notes' AND pk = '[2]'")
        assert cur.fetchone()[0] == 1
    with zones["b"].connect("zonesync_app") as conn:
        assert resident.withdraw(conn, "adm-7") == 1
    _note(ga, 7, 7)
    _applied_everywhere(meta, zones)
    assert note_ids(zones["b"]) == {1, 6}
    for z in ("b", "c"):
        assert not alerts(meta, z, "partition_halted")


def test_an_admit_waits_for_an_applier_transaction_that_read_the_admits_before_it(zones):
    """The gate's guarantee (apply/batch/resident.py): an applier transaction holding the
    admits' head (as it does from its first read to its commit) makes the admit wait, so
    once the admit commits, no transaction that skipped the entity is uncommitted."""
    applier = zones["b"].connect("zonesync_app")
    other = zones["b"].connect("zonesync_app")
    try:
        with applier.cursor() as cur:
            cur.execute("DELETE FROM zonesync.resident_admits")
            applier.commit()
            cur.execute("START TRANSACTION")  # (the applier's connection does not autocommit)
            cur.execute(HEAD)  # what ResidentGate.kept reads first in an applier's transaction
        done = threading.Event()
        admitting = threading.Thread(target=lambda: (resident.admit(other, "lock-7", "a", [("tenant", "7")]),
                                                     done.set()), daemon=True)  # fmt: skip
        admitting.start()

        admitter = other.thread_id()

        def admit_waits() -> bool:
            # the admit's own transaction waits for a row lock (the head's, the applier holds)
            with zones["b"].connect() as probe, probe.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' "
                            "AND trx_mysql_thread_id = %s", (admitter,))  # fmt: skip
                return cur.fetchone()[0] > 0

        def processlist() -> str:
            with zones["b"].connect() as probe, probe.cursor() as cur:
                cur.execute("SELECT ID, COMMAND, STATE, LEFT(INFO, 80) FROM information_schema.PROCESSLIST")
                return repr(cur.fetchall())

        if not wait_until(admit_waits, 10, "", must=False):
            # (CI once saw no wait here: the zone's sessions, to find out what held the admit)
            pytest.fail(f"the admit did not wait for the applier's transaction: {processlist()}")
        assert not done.is_set()
        applier.commit()  # the applier's transaction ends: the admit goes through
        admitting.join(10)
        assert done.is_set()
        with applier.cursor() as cur:
            cur.execute("SELECT le_id FROM zonesync.resident_admits WHERE run_id = 'lock-7'")
            assert cur.fetchall() == (("7",),)
            cur.execute("DELETE FROM zonesync.resident_admits")
        applier.commit()
    finally:
        applier.close()
        other.close()


def _stock(ctx, zones, tmp_path, started: dict, **kw) -> dict:
    """The DAG's stock task: the full copy's Spark job with the entity predicates, in this
    test session's Spark."""
    import json

    from spark_jobs import full_copy
    from tests.integration.copy.conftest import copy_args
    from tests.support.spark import session

    args = copy_args(zones, tmp_path, started["run_id"], started["source"], started["target"],
                     tables=started["tables"].split(","), where=json.loads(started["where"]), **kw)  # fmt: skip
    return full_copy.run(session(), args)


def _verify(ctx, zones, tmp_path) -> dict:
    from spark_jobs import consistency_check
    from tests.integration.check.conftest import job_args
    from tests.support.spark import session

    started = steps.verify_start(ctx)
    args = job_args(ctx.meta, zones, tmp_path, started["check_run_id"], tables=started["tables"].split(","),
                    settle_timeout_s=30.0, docs=None)  # fmt: skip
    return steps.verify(ctx, consistency_check.run(session(), args))


class NoteWriter:
    """A thread writing tenant 7's notes through a's guard until the stop-write refuses it:
    inserts, and updates and deletes of the notes it wrote (the stock copy meets them)."""

    def __init__(self, guard, first: int):
        self.guard, self.next, self.live, self.refused = guard, first, [], None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                with self.guard.transaction() as tx:
                    tx.insert("notes", {"note_id": self.next, "tenant_id": 7, "body": "live"})
                    n = self.next
                    if n % 3 == 1 and self.live:
                        tx.update("notes", {"note_id": self.live[-1]}, {"body": "updated"})
                    if n % 5 == 4 and len(self.live) > 1:
                        tx.delete("notes", {"note_id": self.live.pop(0)})
            except (WrongZone, EntityWriteStopped) as exc:
                self.refused = exc
                return
            self.live.append(self.next)
            self.next += 1
            time.sleep(0.005)


def test_a_tenant_s_resident_rows_move_with_it_while_it_writes_and_leave_the_source(
    notes, cluster, guard_env, zones, meta, tmp_path
):
    """Tenant 7's 2,000 notes in a, written on through the stock copy (cut short after two
    chunks, then run again, as a killed one is) and the verify: after
    the cutover and the release, b holds exactly what a held at the stop (every write a
    accepted), a and c hold none of tenant 7's notes, tenant 8's stay in a only, b writes
    tenant 7's notes and a refuses them."""
    ga, gb = guard_env("a"), guard_env("b")
    guards.wait_acks(meta, EntityRegistry(meta).head(), {"a", "b", "c"}, 10)
    with zones["a"].connect("zonesync_app") as conn, conn.cursor() as cur:
        # loaded behind the guard, as an application's bulk load would be (version: now, as a guard's)
        insert = "INSERT INTO notes (note_id, tenant_id, body, _zs_origin, _zs_version) VALUES (%s, %s, 's', 1, %s)"
        now_us = time.time_ns() // 1000
        cur.executemany(insert, [(n, 7, now_us) for n in range(10_000, 12_000)] + [(500, 8, now_us)])
        conn.commit()
    ctx = _ctx(zones, meta, "res-7")
    writer = NoteWriter(ga, 20_000)
    writer.thread.start()
    try:
        wait_until(lambda: len(writer.live) >= 20 or writer.refused, 30, "a writes tenant 7's notes")
        assert writer.refused is None, writer.refused
        steps.preflight(ctx)
        started = steps.admit(ctx)
        assert started["tables"] == "notes" and "tenant_id" in started["where"], started
        assert steps.admit(ctx) == started  # admitted once: a re-run changes nothing
        cut_short = _stock(ctx, zones, tmp_path, started, stop_after=2)  # as if killed after two chunks
        assert cut_short["notes"]["done"] == 2 < cut_short["notes"]["chunks"], cut_short
        result = _stock(ctx, zones, tmp_path, started)  # the re-run lands only the chunks not done
        assert result["notes"]["done"] == result["notes"]["chunks"] and result["notes"]["orphans"] is None, result
        assert cut_short["notes"]["rows"] + result["notes"]["rows"] >= 2_000, (cut_short, result)
        report = _verify(ctx, zones, tmp_path)  # writes go on: rows in flight excused
        assert report["differ"] == 0 and report["tables"] == 2, report  # orders and notes
        steps.stop_write(ctx)
        writer.thread.join(30)
        steps.sync_position(ctx)
        wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
        counts = steps.final_check(ctx)
        expected = note_ids(zones["a"], 7)
        assert counts["notes"]["a"] == counts["notes"]["b"] == len(expected) >= 2_000, counts
        steps.flip(ctx)
        run = steps.lift(ctx)
        assert run.status == "succeeded", run
        assert note_ids(zones["b"], 7) == expected
        purged = steps.release(ctx)
        assert purged == {"notes": len(expected)}, purged
        assert note_ids(zones["a"]) == {500} and note_ids(zones["b"]) == expected
        with zones["b"].connect("zonesync_app") as conn:
            assert not resident.admitted(conn, "res-7")
        guards.wait_acks(meta, run.lift_version, {"a", "b"}, 10)
        _note(gb, 30_000, 7)
        with pytest.raises(WrongZone):
            _note(ga, 30_001, 7)
        _applied_everywhere(meta, zones, "b")
        assert note_ids(zones["a"]) == {500} and note_ids(zones["c"]) == set()
        assert note_ids(zones["b"], 7) == expected | {30_000}
    finally:
        writer.stopped.set()  # (ends by itself at the stop-write; here also when the test fails early)
        writer.thread.join(30)


def test_a_rolled_back_migration_purges_the_target_s_partial_copy(notes, cluster, guard_env, zones, meta, tmp_path):
    """Admitted and stocked, then rolled back before the stop: b no longer admits tenant 7
    and holds none of its notes; a keeps them all and goes on writing them."""
    ga = guard_env("a")
    for n in range(1, 31):
        _note(ga, n, 7)
    ctx = _ctx(zones, meta, "res-back-7")
    steps.preflight(ctx)
    _stock(ctx, zones, tmp_path, steps.admit(ctx))
    _note(ga, 31, 7)  # through the stream, into b
    _applied_everywhere(meta, zones)
    assert note_ids(zones["b"]) == set(range(1, 32))
    assert steps.rollback(ctx, "test").startswith("nothing was pushed")
    assert note_ids(zones["b"]) == set() and note_ids(zones["a"]) == set(range(1, 32))
    with zones["b"].connect("zonesync_app") as conn:
        assert not resident.admitted(conn, "res-back-7")
    _note(ga, 32, 7)
    _applied_everywhere(meta, zones)
    assert note_ids(zones["b"]) == set()


def test_plan2_stops_the_tenant_first_and_is_refused_above_its_size_limit(notes, cluster, guard_env, zones, meta,
                                                                          tmp_path):  # fmt: skip
    """plan2 (S004-28): above plan2_max_rows it is refused naming the mode and the count,
    nothing stopped; within it, writes stop before the copy, verify is skipped (the final
    check compares with writes stopped), and the notes move. The zones run in different
    server time zones (S004-34): every DATETIME and TIMESTAMP arrives as the same value."""
    with server_time_zones(zones, {"a": "-03:00", "b": "+05:30"}):
        _plan2(guard_env, zones, meta, tmp_path)


def _plan2(guard_env, zones, meta, tmp_path) -> None:
    ga = guard_env("a")
    guard_env("b")
    moment = datetime.datetime(2026, 3, 29, 2, 30, 15, 123456)  # a DST change in much of Europe
    for n in range(1, 51):
        with ga.transaction() as tx:
            tx.insert("notes", {"note_id": n, "tenant_id": 7, "body": "x", "written_at": moment,
                                "seen_at": moment + datetime.timedelta(seconds=n)})  # fmt: skip
    ctx = steps.MigrationContext(meta, "p2-7", MigrationRequest("tenant", "7", "b", "plan2", "test"),
                                 lambda z: zones[z].connect("zonesync_app"), actor="test", max_txn_ms=200)  # fmt: skip
    steps.preflight(ctx)
    with pytest.raises(MigrationRefused, match=r"^mode: plan2 stops tenant 7's writes while its 50 resident rows are "
                                               r"copied, more than plan2_max_rows \(10\): use plan1"):  # fmt: skip
        steps.stop_first(ctx, 10)
    assert ctx.store.require("p2-7").stop_version is None
    _note(ga, 51, 7)  # still writable
    assert "stop_version" in steps.stop_first(ctx, 1_000)
    with pytest.raises(EntityWriteStopped):
        _note(ga, 52, 7)
    _stock(ctx, zones, tmp_path, steps.admit(ctx))
    assert steps.verify_start(ctx)["tables"] == "" and steps.verify(ctx, None)["skipped"].startswith("plan2")
    steps.stop_write(ctx)  # (the cutover's first step: already stopped, it only re-checks the acks)
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    assert steps.final_check(ctx)["notes"] == {"a": 51, "b": 51}
    at_source = note_rows(zones["a"], 7)
    # the guard's sessions write under '+00:00' whatever the server's zone: the values as given
    assert at_source[0][2] == moment and at_source[0][3] == moment + datetime.timedelta(seconds=1)
    steps.flip(ctx)
    assert steps.lift(ctx).status == "succeeded"
    assert steps.release(ctx) == {"notes": 51}
    assert note_ids(zones["b"], 7) == set(range(1, 52)) and note_ids(zones["a"], 7) == set()
    assert note_rows(zones["b"], 7) == at_source  # the same instants and wall times, read under '+00:00'


def test_a_tenant_s_row_meeting_another_tenant_s_row_with_its_key_is_never_overwritten(
    notes, cluster, guard_env, zones, meta, tmp_path
):
    """S004-36 (the seed's ODKU lesson) in a migration: note 5000 is tenant 7's in a and
    tenant 409's in b (keys not unique across zones). The stock copy does not overwrite b's
    row, the stream's update of it is locked (an alert), the final check finds tenant 7's
    notes short in b (verify, row by row, names it the same way before the stop: see
    test_migration_steps.py), and the rollback leaves tenant 409's note as it was."""
    ga, gb = guard_env("a"), guard_env("b")
    version = EntityRegistry(meta).register_biz("tenant", "409", "b", [("tenant", "409")], "test: tenant 409 in b")
    guards.wait_acks(meta, version, {"a", "b"}, 10)
    _note(ga, 5000, 7, "tenant 7's")
    _note(ga, 5001, 7)
    _note(gb, 5000, 409, "tenant 409's")
    ctx = _ctx(zones, meta, "odku-7")
    steps.preflight(ctx)
    _stock(ctx, zones, tmp_path, steps.admit(ctx))
    with ga.transaction() as tx:
        tx.update("notes", {"note_id": 5000}, {"body": "tenant 7's, changed"})
    wait_until(lambda: alerts(meta, "b", "row_locked"), 30, "b locks note 5000 instead of overwriting it")
    steps.stop_write(ctx)
    steps.sync_position(ctx)
    wait_until(lambda: steps.synced(ctx), 60, "b applied a's stream up to P")
    with pytest.raises(steps.MigrationError, match=r"final_check: the LEs' rows differ: notes: a 2 rows \(checksum "
                                                   r"\d+\), b 1 rows"):  # fmt: skip
        steps.final_check(ctx)
    steps.rollback(ctx, "test")
    assert note_rows(zones["b"], 409)[0][:2] == (5000, "tenant 409's") and note_ids(zones["b"]) == {5000}
    assert note_rows(zones["a"], 7)[0][:2] == (5000, "tenant 7's, changed")


def test_a_resident_table_the_stock_copy_cannot_take_is_refused_before_anything_moves(notes, guard_env, zones, meta):
    """A unique key without the entity column (a moving tenant's row could meet another
    tenant's row through it): admit refuses in one line naming the table, the key and the
    fix, and admits nothing in b. (Unique keys holding the entity column move:
    test_resident_unique_keys.py.)"""
    guard_env("a")
    with zones["a"].connect("zonesync_app") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("ALTER TABLE notes ADD COLUMN tag VARCHAR(16) NULL, ADD UNIQUE KEY uk_notes_tag (tag)")
    ctx = _ctx(zones, meta, "uk-7")
    steps.preflight(ctx)
    refused = (
        r"^tables: notes has unique keys without its entity column tenant_id \(uk_notes_tag\).*add the "
        r"column to the key.* \(a resident table moves"
    )
    with pytest.raises(MigrationRefused, match=refused):
        steps.admit(ctx)
    with zones["b"].connect("zonesync_app") as conn:
        assert not resident.admitted(conn, "uk-7")
    steps.rollback(ctx, "test")


def _tenant_in(inst, tenant_id: int) -> bool:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM tenants WHERE tenant_id = %s", (tenant_id,))
        return cur.fetchone()[0] == 1


def test_an_applier_that_cannot_ask_meta_never_applies_a_resident_row(notes, guard_env, zones, meta, broker,
                                                                       test_cfg):  # fmt: skip
    """S004-37 with meta unreachable (S003-03): an applier that starts without meta applies
    nothing until it has read which tables are resident (a note would land in b as an
    ordinary row); once meta answers, ordinary rows flow and notes do not. One partition:
    a tenant row written after a note is applied after the note's event."""
    from tests.support.replication import Cluster, reset_state
    from tests.support.tcp_proxy import TcpProxy
    from zonesync.meta.db import MetaConfig

    reset_state(zones, meta)
    proxy = TcpProxy(meta.port).start()
    cluster = Cluster(zones, MetaConfig(meta.host, proxy.port, meta.user, meta.password, meta.database), broker,
                      test_cfg.broker_file, partitions=1)  # fmt: skip
    ga = guard_env("a")
    try:
        cluster.start(which=("replicator",), zones=("a",))
        cluster.wait_started()
        proxy.cut()
        cluster.start(which=("applier",), zones=("b",))
        _note(ga, 1, 7)
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": 1, "name": "after note 1"})
        time.sleep(2.0)  # the applier runs, meta unreachable: it must hold everything
        assert not _tenant_in(zones["b"], 1) and note_ids(zones["b"]) == set()
        proxy.restore()
        wait_until(lambda: _tenant_in(zones["b"], 1), 30, "b applied a's stream once meta answered")
        assert note_ids(zones["b"]) == set() and note_ids(zones["a"]) == {1}, "a resident row was applied in b"
    finally:
        if proxy._listener is None:
            proxy.restore()
        cluster.stop()
        proxy.cut()
        reset_state(zones, meta)
