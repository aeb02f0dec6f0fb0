"""The whole online full copy (zonesync.copy.steps + the Spark row copy) with real zones,
broker, replicators and appliers, while zones write through their guards.

- S000-70 / S000-78 / S001-12 / S001-13 / S002-15: zone b loses its rows; a copy from a
  rebuilds it while a, b and c keep writing; it joins, and then every zone holds the same
  rows, with no lock, halt or stop on the way; b's replicator never published a copied row.
- S000-71 .. S000-77: each overlap of the row copy and the stream, forced in a fixed order
  by the job's `staged` hook (a wave read, not yet landed: its tasks wait at a gate),
  never by sleeps.
"""

from __future__ import annotations

import random

import pymysql
import pytest

from spark_jobs import full_copy
from tests.integration.copy.conftest import copy_args
from tests.support.background import Background, wait_until
from tests.support.replication import ZONE_IDS, ZONES, alerts, checksum, wait_converged
from zonesync.copy import positions, steps
from zonesync.copy.request import CopyRequest
from zonesync.copy.store import SUCCEEDED
from zonesync.dal.errors import WriteRefused
from zonesync.events import decode_message

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OWN = {"a": range(1, 400), "b": range(400, 800), "c": range(800, 1024)}  # ZSID = tenant_id mod 1024


def own_keys(zone: str, count: int, start: int = 0) -> list[int]:
    """Tenant ids zone owns under the baseline rules: 1024·k + r for r in its ZSID range."""
    lo, hi = OWN[zone][0], OWN[zone][-1]
    width = hi - lo + 1
    return [1024 * ((start + i) // width) + lo + (start + i) % width for i in range(count)]


def seed(zones, zone: str, keys) -> None:
    """Rows written straight into their owner zone (captured like any write)."""
    conn = zones[zone].connect("zonesync_app")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, %s, %s, %s)",
            [(k, f"seed-{k}", ZONE_IDS[zone], 1_000 + k) for k in keys],
        )
    conn.commit()
    conn.close()


def wipe(inst) -> None:
    """The damage: every row of b's tenants gone, and nothing of it published."""
    conn = inst.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute("DELETE FROM tenants")
    conn.commit()
    conn.close()


class GuardLoad(Background):
    """A zone's application through its guard: inserts of new own keys, updates and
    deletes of the keys it inserted (and of `old` keys it owned before), until stopped."""

    def __init__(self, guard, zone: str, seed_: int, old=()):
        super().__init__()
        self.name = f"load-{zone}"
        self.guard, self.zone = guard, zone
        self.rnd = random.Random(seed_)
        self.fresh = iter(own_keys(zone, 100_000, start=5_000))
        self.live = list(old)
        self.written: set[int] = set()
        self.transactions = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.guard.transaction() as tx:
                    self._one(tx)
                self.transactions += 1
            except (WriteRefused, pymysql.err.OperationalError):
                pass  # refused or a deadlock: nothing written, the application retries

    def _one(self, tx) -> None:
        roll = self.rnd.random()
        if roll < 0.4 or len(self.live) < 5:
            k = next(self.fresh)
            tx.insert("tenants", {"tenant_id": k, "name": f"{self.zone}-new"})
            self.live.append(k)
        elif roll < 0.85:
            k = self.rnd.choice(self.live)
            if tx.update("tenants", {"tenant_id": k}, {"name": f"{self.zone}-{self.rnd.random():.6f}"}) == 0:
                self.live.remove(k)
        else:
            k = self.live.pop(self.rnd.randrange(len(self.live)))
            tx.delete("tenants", {"tenant_id": k})
        self.written.add(k)


def context(cluster, zones, meta, run_id: str, source="a", target="b") -> steps.CopyContext:
    return steps.CopyContext(
        meta=meta,
        run_id=run_id,
        request=CopyRequest(source, target, ("tenants",), "rebuild", "test: b lost its rows"),
        zone_conn=lambda z: zones[z].connect("zonesync_app"),
        bootstrap=cluster.bootstrap,
        partitions=cluster.partitions,
        topic_of=cluster.topic,
        actor="test",
    )


def run_copy(ctx, spark, zones, tmp_path, staged=None, **kw) -> dict:
    """The DAG's steps in its order, the row copy in this process's Spark session."""
    steps.preflight(ctx)
    steps.record_start(ctx)
    steps.start_incremental(ctx)
    req = ctx.request
    kw.setdefault("tables", ctx.run().tables)
    result = full_copy.run(spark, copy_args(zones, tmp_path, ctx.run_id, req.source_zone, req.target_zone, **kw),
                           staged=staged)  # fmt: skip
    wait_until(lambda: steps.caught_up(ctx), 60, "the target caught up with every source", step=0.1)
    result["pruned"] = steps.prune(ctx)
    steps.verify(ctx)
    steps.join(ctx)
    return result


def published_keys(cluster, zone: str) -> set[int]:
    """Every tenant id zone's replicator published to its topic (read from the start)."""
    from confluent_kafka import Consumer, TopicPartition

    config = {"bootstrap.servers": cluster.bootstrap(), "group.id": "copy-test", "enable.auto.commit": False}
    consumer = Consumer(config)
    keys: set[int] = set()
    try:
        for p in range(cluster.partitions):
            tp = TopicPartition(cluster.topic(zone), p)
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high == 0:
                continue
            consumer.assign([TopicPartition(cluster.topic(zone), p, 0)])
            offset = -1
            while offset < high - 1:
                msg = consumer.poll(5)
                assert msg is not None and not msg.error(), f"reading {tp}"
                offset = msg.offset()
                keys.update(e.pk["tenant_id"] for e in decode_message(msg.value()) if e.table == "tenants")
    finally:
        consumer.close()
    return keys


def no_trouble(meta) -> None:
    for z in ZONES:
        for kind in ("row_locked", "partition_halted"):
            assert alerts(meta, z, kind) == [], f"zone {z}: {kind} {alerts(meta, z, kind)[:3]}"


def test_a_wiped_zone_is_rebuilt_while_every_zone_writes(cluster, guard_env, zones, meta, spark, tmp_path,
                                                        clean_copies):  # fmt: skip
    seeded = {z: own_keys(z, n) for z, n in (("a", 1500), ("b", 300), ("c", 300))}
    for z, keys in seeded.items():
        seed(zones, z, keys)
    wait_converged(zones, ("tenants",), timeout=60)
    wipe(zones["b"])
    loads = [GuardLoad(guard_env(z), z, i, old=seeded[z][:200]) for i, z in enumerate(ZONES)]
    ctx = context(cluster, zones, meta, "rebuild-b")
    for load in loads:
        load.__enter__()
    try:
        wait_until(lambda: all(ld.transactions >= 20 for ld in loads), 30, "every zone writes")
        result = run_copy(ctx, spark, zones, tmp_path, chunk_rows=250)
        wait_until(lambda: all(ld.transactions >= 40 for ld in loads), 30, "every zone writes after the join")
    finally:
        for load in loads:
            load.__exit__(None, None, None)
    wait_converged(zones, ("tenants",), timeout=60)
    assert checksum(zones["b"]) == checksum(zones["a"]) == checksum(zones["c"])
    assert result["tenants"]["done"] == result["tenants"]["chunks"] > 6
    assert ctx.run().status == SUCCEEDED
    no_trouble(meta)
    # S001-13: b published its own writes only, never a row the copy brought it
    others = set(seeded["a"]) | set(seeded["c"]) | loads[0].written | loads[2].written
    assert published_keys(cluster, "b") & others == set()
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.copy_tables")
        assert cur.fetchone()[0] == 0, "the copied table is still in copy mode after the join"


def _row(inst, key: int):
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT name, _zs_version FROM tenants WHERE tenant_id = %s", (key,))
        return cur.fetchone()


def _tombstone(inst, key: int):
    with inst.connect().cursor() as cur:
        cur.execute("SELECT version FROM zonesync.tombstones WHERE table_name = 'tenants' AND pk = %s", (f"[{key}]",))
        row = cur.fetchone()
        return None if row is None else row[0]


def test_each_overlap_of_row_copy_and_stream_ends_in_the_newest_row(cluster, guard_env, zones, meta, spark,
                                                                   tmp_path, clean_copies):  # fmt: skip
    """Chunks of 100 keys, one at a time. While chunk 0 (keys up to 101) is read and not
    landed yet, the stream delivers: an update of key 10 (S000-73: it lands first, as the
    full new row, and the older copied row is then ignored), a delete of key 20 (S000-76:
    its tombstone keeps the late copied row away), and an insert of key 1174 in the last
    chunk, not read yet (S000-71: both paths bring it, one row). Key 50 was deleted before the copy
    started (S000-75: never copied); key 60 is updated after the start and before its
    chunk is read (S000-72: the copy brings the newest row, the stream's update is a
    no-op); key 40 is updated after the copy read it (S000-74) and key 70 deleted then
    (S000-75). Keys in chunks already read are deleted while later ones are read (S000-77:
    keyed chunks skip nothing)."""
    guard = guard_env("a")
    seed(zones, "a", range(1, 301))
    wait_converged(zones, ("tenants",), timeout=60)
    wipe(zones["b"])
    with guard.transaction() as tx:
        tx.delete("tenants", {"tenant_id": 50})
    ctx = context(cluster, zones, meta, "overlaps")
    steps.preflight(ctx)
    steps.record_start(ctx)
    steps.start_incremental(ctx)
    with guard.transaction() as tx:
        tx.update("tenants", {"tenant_id": 60}, {"name": "before its read"})
    seen: list[int] = []

    def staged(table, wave):
        seen.extend(c["chunk"] for c in wave)
        if wave[0]["chunk"] == 0:
            with guard.transaction() as tx:
                tx.update("tenants", {"tenant_id": 10}, {"name": "stream first"})
                tx.delete("tenants", {"tenant_id": 20})
                tx.insert("tenants", {"tenant_id": 150 + 1024, "name": "inserted during the copy"})
            wait_until(lambda: (_row(zones["b"], 10) or ("",))[0] == "stream first", 30, "b has 10's update")
            wait_until(lambda: _tombstone(zones["b"], 20) is not None, 30, "b has 20's tombstone")
            wait_until(lambda: _row(zones["b"], 150 + 1024) is not None, 30, "b has the insert")
        if wave[0]["chunk"] == 1:
            with guard.transaction() as tx:  # behind the copy: chunk 0 is landed
                for k in (5, 6, 7):
                    tx.delete("tenants", {"tenant_id": k})

    req = ctx.request
    args = copy_args(zones, tmp_path, ctx.run_id, req.source_zone, req.target_zone, chunk_rows=100, parallel=1)
    full_copy.run(spark, args, staged=staged)
    assert seen == [0, 1, 2]  # keys 1..299 but 50: (-inf, 101], (101, 201], (201, +inf)
    assert _row(zones["b"], 10)[0] == "stream first" and _row(zones["b"], 20) is None
    assert _row(zones["b"], 50) is None and _row(zones["b"], 60)[0] == "before its read"
    with guard.transaction() as tx:
        tx.update("tenants", {"tenant_id": 40}, {"name": "after its read"})
        tx.delete("tenants", {"tenant_id": 70})
    wait_until(lambda: steps.caught_up(ctx), 60, "b caught up", step=0.1)
    steps.prune(ctx)
    steps.verify(ctx)
    steps.join(ctx)
    wait_converged(zones, ("tenants",), timeout=30)
    rows = {r[0]: r[1] for r in checksum(zones["b"])}
    assert rows == {r[0]: r[1] for r in checksum(zones["a"])}
    assert rows[40] == "after its read" and 70 not in rows and 5 not in rows
    assert sum(1 for k in rows if k == 150 + 1024) == 1
    no_trouble(meta)


def _unpublished(inst, rows) -> None:
    """Rows written into one zone only (skip_replication: never published)."""
    conn = inst.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        cur.executemany("INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, 'x', %s, 5)", rows)
    conn.commit()
    conn.close()


def test_rows_only_the_target_holds_go_only_when_certain(cluster, guard_env, zones, meta, spark, tmp_path,
                                                        clean_copies):  # fmt: skip
    """b holds rows a lacks. Deleted: a's rows a deleted while b was away (owner a lacks
    them). Kept: b's own rows (b is their owner), c's rows c has and a has not received,
    and rows of ZSIDs in a switch (nobody can vouch for them). verify then finds b and a
    different, and rollback puts b's appliers back and ends the run rolled back."""
    from tests.support.rules import rules_doc
    from zonesync.meta.store import MetaStore

    seed(zones, "a", range(1, 201))
    wait_converged(zones, ("tenants",), timeout=60)
    stale, mine, theirs, switching = list(range(300, 310)), [500, 501, 502], [900, 901], [360, 361]
    _unpublished(zones["b"], [(k, 1) for k in stale + switching] + [(k, 2) for k in mine] + [(k, 3) for k in theirs])
    _unpublished(zones["c"], [(k, 3) for k in theirs])
    rules = [{"zsids": "0-349", "zone": "a"}, {"zsids": "350-399", "zone": "a", "status": "RESHARDING"},
             {"zsids": "400-799", "zone": "b"}, {"zsids": "800-1023", "zone": "c"}]  # fmt: skip
    MetaStore(meta).publish_rules(rules_doc(rules=rules), "test: 350-399 in a switch", require_writable=False)
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT source_zone, partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state")
        before = sorted(cur.fetchall())

    ctx = context(cluster, zones, meta, "prune")
    steps.preflight(ctx)
    steps.record_start(ctx)
    steps.start_incremental(ctx)
    req = ctx.request
    result = full_copy.run(spark, copy_args(zones, tmp_path, ctx.run_id, req.source_zone, req.target_zone))
    assert result["tenants"]["orphans"] == len(stale + mine + theirs + switching)
    wait_until(lambda: steps.caught_up(ctx), 60, "b caught up", step=0.1)
    assert steps.prune(ctx) == {"tenants": {"candidates": 17, "deleted": 10, "kept": 7}}
    held = {r[0] for r in checksum(zones["b"])}
    assert not held & set(stale) and set(mine + theirs + switching) <= held
    assert all(_tombstone(zones["b"], k) == 5 for k in stale)

    with pytest.raises(steps.CopyRefused, match="verify: tenants differs between a and b"):
        steps.verify(ctx, attempts=2, pause_s=0.1)
    assert steps.rollback(ctx, "verify failed").status == "rolled_back"
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.copy_tables")
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT source_zone, partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state")
        after = sorted(cur.fetchall())
    # back where it was, or further (the appliers went on from there after the rollback)
    assert [r[:2] + (r[4],) for r in after] == [r[:2] + (r[4],) for r in before]
    assert all(a[2] >= b[2] for a, b in zip(after, before, strict=True))
    no_trouble(meta)


def _with_b_state(zones) -> dict:
    conn = zones["b"].connect()
    try:
        return positions.snapshot(conn)
    finally:
        conn.close()


def test_a_repair_copy_cures_partitions_halted_for_a_full_copy(cluster, guard_env, zones, meta, spark, tmp_path,
                                                              clean_copies):  # fmt: skip
    """S000-53 / S000-57 / S000-69: b's partitions of source a halted "needs full copy" (as
    after expired messages) while a kept writing. A repair copy of only some tables is
    refused (the lost events may touch any table); one of every table runs, the halted
    partitions resume from positions the copy made safe, b ends equal to a, and a's next
    write reaches b by normal replication."""
    from zonesync.apply.tools.progress import halt

    seed(zones, "a", range(1, 301))
    wait_converged(zones, ("tenants",), timeout=60)
    early = context(cluster, zones, meta, "some-before-the-halt")  # its preflight passes: nothing halted yet
    steps.preflight(early)
    conn = zones["b"].connect()
    halted = halt(conn, "a", None, "needs full copy: messages expired (test)")
    conn.close()
    assert halted == list(range(cluster.partitions))
    steps.record_start(early)
    state = _with_b_state(zones)
    with pytest.raises(steps.CopyRefused, match="tables: zone b has halted partitions"):
        steps.start_incremental(early)  # the halt came after its preflight: refused before anything moved
    assert _with_b_state(zones) == state
    steps.rollback(early, "test: refused")
    guard = guard_env("a")
    with guard.transaction() as tx:
        for k in range(301, 351):
            tx.insert("tenants", {"tenant_id": k, "name": "while b was halted"})
        for k in range(1, 21):
            tx.update("tenants", {"tenant_id": k}, {"name": "updated while b was halted"})
        for k in range(21, 31):
            tx.delete("tenants", {"tenant_id": k})
    partial = context(cluster, zones, meta, "repair-some")
    with pytest.raises(steps.CopyRefused, match="tables: zone b has halted partitions"):
        steps.preflight(partial)
    assert partial.store.get("repair-some") is None

    ctx = context(cluster, zones, meta, "repair")
    ctx.request = CopyRequest("a", "b", (), "repair", "test: cure the halt")
    steps.preflight(ctx)
    steps.record_start(ctx)
    steps.start_incremental(ctx)
    full_copy.run(spark, copy_args(zones, tmp_path, "repair", "a", "b", tables=ctx.run().tables))
    wait_until(lambda: steps.caught_up(ctx), 60, "b caught up", step=0.1)
    steps.prune(ctx)
    steps.verify(ctx)
    steps.join(ctx)
    assert checksum(zones["b"]) == checksum(zones["a"])
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.apply_state WHERE status <> 'running'")
        assert cur.fetchone()[0] == 0
    with guard.transaction() as tx:
        tx.insert("tenants", {"tenant_id": 399, "name": "after the repair"})
    wait_until(lambda: _row(zones["b"], 399) is not None, 30, "a's next write reaches b")
    no_trouble(meta)


def test_start_incremental_killed_between_its_transactions_is_run_again_safely(cluster, guard_env, zones, meta,
                                                                              clean_copies, monkeypatch):  # fmt: skip
    """A task killed after start_incremental halted the target's partitions and before it
    moved them: the retry records nothing new as "before" (rollback would otherwise restore
    the halted state), and moves every partition where the first attempt would have, judged
    from what the target held before (not from the halted state, which reads as "never
    ran" and would jump running partitions forward), and sets it running."""
    from zonesync.copy import positions

    seed(zones, "a", range(1, 101))
    wait_converged(zones, ("tenants",), timeout=60)
    ctx = context(cluster, zones, meta, "killed-step")
    steps.preflight(ctx)
    steps.record_start(ctx)
    real_install = positions.install

    def killed(conn, *args):
        with conn.cursor() as cur:  # the first transaction, as install commits it
            cur.execute("UPDATE zonesync.apply_state SET status = 'halted', detail = 'full copy: moving'")
        conn.commit()
        raise KeyboardInterrupt("killed between the two transactions")

    monkeypatch.setattr(positions, "install", killed)
    with pytest.raises(KeyboardInterrupt):
        steps.start_incremental(ctx)
    before = ctx.run().positions("before_json")
    assert before and all(v[2] == "running" for parts in before.values() for v in parts.values())
    monkeypatch.setattr(positions, "install", real_install)
    steps.start_incremental(ctx)
    assert ctx.run().positions("before_json") == before, "the retry overwrote what the target held before"
    # every partition where the first attempt would have put it: judged from what b held
    # before, not from the halted state the killed attempt left
    expected = {
        (s, int(p)): positions.moved(s, "a", tuple(before[s][p][:3]), tuple(pos))
        for s, parts in ctx.run().positions().items()
        for p, pos in parts.items()
    }
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT source_zone, partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state")
        rows = cur.fetchall()
    assert {(s, int(p)): (int(lsn), int(off)) for s, p, lsn, off, _ in rows} == expected
    assert {r[4] for r in rows} == {"running"}
    assert steps.rollback(ctx, "test").status == "rolled_back"
    with zones["b"].connect().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM zonesync.apply_state WHERE status <> 'running'")
        assert cur.fetchone()[0] == 0, "rollback restored a halted state"


def test_a_zone_being_filled_is_no_source_and_a_source_is_not_filled(cluster, guard_env, zones, meta, clean_copies):
    """While a -> b runs, b -> c and c -> a are refused (b lacks rows its chunks have not
    landed, and no stream carries them; a is being read), nothing recorded; a -> c is not."""
    steps.preflight(context(cluster, zones, meta, "a-to-b"))
    for run_id, source, target in (("b-to-c", "b", "c"), ("c-to-a", "c", "a")):
        with pytest.raises(steps.CopyRefused, match="^from: copy a-to-b .a -> b. is running"):
            steps.preflight(context(cluster, zones, meta, run_id, source, target))
        assert steps.CopyStore(meta).get(run_id) is None
    assert steps.preflight(context(cluster, zones, meta, "a-to-c", "a", "c")).status == "running"


def test_a_copy_created_beside_an_uncommitted_one_waits_for_it_and_is_refused(cluster, zones, meta, clean_copies):
    """Write skew: copy b -> c is being created (its row written, not yet committed) when
    c -> a's preflight checks; c -> a waits for it rather than pass blind, then is refused
    (c would be read while being filled), nothing recorded."""
    import threading

    other = meta.connect(autocommit=False)
    try:
        with other.cursor() as cur:
            cur.execute("INSERT INTO copies (run_id, source_zone, target_zone, mode, tables_json, reason, actor) "
                        "VALUES ('b-to-c', 'b', 'c', 'rebuild', '[]', 'test', 'test')")  # fmt: skip
        outcome: dict = {}

        def create():
            try:
                outcome["copy"] = steps.preflight(context(cluster, zones, meta, "c-to-a", "c", "a"))
            except steps.CopyRefused as exc:
                outcome["refused"] = str(exc)

        t = threading.Thread(target=create, daemon=True)
        t.start()

        def waiting() -> bool:  # c -> a's locking read of the running copies, blocked on b -> c's row
            rows, _ = meta.run("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s",
                               ("SELECT run_id, source_zone, target_zone FROM copies%FOR UPDATE",))  # fmt: skip
            return int(rows[0][0]) > 0 or not t.is_alive()

        wait_until(waiting, 30, "c -> a's preflight reached its check")
        assert t.is_alive(), f"c -> a passed its check without waiting for b -> c: {outcome}"
        other.commit()
        t.join(30)
    finally:
        other.close()
    assert outcome.get("refused", "").startswith("from: copy b-to-c (b -> c) is running"), outcome
    assert steps.CopyStore(meta).get("c-to-a") is None


def test_an_idle_partition_moved_back_is_read_again(cluster, zones, meta, clean_copies):
    """A copy's start halts the target's partitions and sets them running at earlier
    positions in two transactions, which can both fall between two of the applier's
    once-a-second looks. A partition with new events would fail its next claim and be
    read again; an idle one has no round to fail: the applier sees its recorded LSN below
    what it saw commit, and reads it again from there (here both moves in one transaction:
    the look never sees it halted)."""
    observer = zones["b"].connect()

    def state() -> dict:
        with observer.cursor() as cur:
            cur.execute("SELECT partition_no, applied_lsn, kafka_offset FROM zonesync.apply_state "
                        "WHERE source_zone = 'a'")  # fmt: skip
            rows = {p: (lsn, off) for p, lsn, off in cur.fetchall()}
        observer.commit()
        return rows

    def present() -> int:
        with observer.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM zonesync_app.tenants WHERE tenant_id IN ({', '.join(map(str, keys))})")
            n = cur.fetchone()[0]
        observer.commit()
        return n

    warm = own_keys("a", 1, start=89_999)  # b's applier is running: every partition has its row
    seed(zones, "a", warm)
    wait_until(lambda: _row(zones["b"], warm[0]) is not None, 60, "b applies a's writes")
    before = state()
    keys = own_keys("a", 30, start=90_000)
    seed(zones, "a", keys)
    wait_until(lambda: present() == len(keys), 60, "b applied a's new rows")
    with observer.cursor() as cur:  # what a copy's start does to b, at once
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute(f"DELETE FROM zonesync_app.tenants WHERE tenant_id IN ({', '.join(map(str, keys))})")
        for p, (lsn, off) in before.items():
            cur.execute("UPDATE zonesync.apply_state SET applied_lsn = %s, kafka_offset = %s "
                        "WHERE source_zone = 'a' AND partition_no = %s", (lsn, off, p))  # fmt: skip
    observer.commit()
    try:
        wait_until(lambda: present() == len(keys), 30, "b read a's moved-back partitions again")
    finally:
        observer.close()
    no_trouble(meta)
