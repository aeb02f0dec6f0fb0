"""S001-05: checkpoint granularity. The replicator is killed (-9) while it publishes one
large multi-row, multi-table transaction: part of its events are on the broker, the rest
were never sent (每一个日志块的所有写发完毕后，再重复读).

Zone a's replicator runs as a process of its own (tests/support/replicator_process.py,
slowed per message so the kill lands inside the transaction's publishing); the appliers
of b (running throughout, so it applied the first part) and c (started after the restart,
reading every copy from the broker) run in this process. What must hold:

- every checkpoint ever saved lies at a transaction boundary of a's binlog (the end of an
  Xid or COMMIT, a DDL, or an event outside any transaction), never inside one; the one
  standing at the kill is at or before the transaction's GTID event;
- the restarted replicator re-reads the whole transaction and publishes all of it again,
  each re-published event identical to its first copy (same LSN, prev_lsn, images);
- the appliers skip the copies: each applies every event once (no double effect), and b
  and c end with exactly a's rows and versions.
"""

from __future__ import annotations

import time

import msgspec
import pytest
from confluent_kafka import Consumer

from tests.support import binlog, replicator_process
from tests.support.background import wait_until
from tests.support.binlog import assert_at_boundaries, transaction_span
from tests.support.replication import alerts, applied_through, checkpoint_history, checksum, wait_converged
from tests.support.topics import copies_by_lsn, published
from zonesync.events import file_number

pytestmark = pytest.mark.integration

PARTITIONS = 8
T1_TENANTS = 10_000  # ids 100000.. : inserted by the big transaction
T1_ORDERS = 10_000  # ids 200000.. : likewise
PRE_TENANTS, PRE_ORDERS = 50, 20  # written before it, in small transactions
T1_UPDATES, T1_DELETES = PRE_TENANTS, 10  # the big transaction also updates and deletes those
T1_ROWS = T1_TENANTS + T1_ORDERS + T1_UPDATES + T1_DELETES
POST = 3  # single-row updates written after it (read after it by the restarted replicator)
CHUNK = 500


@pytest.fixture
def mesh(meta, zones, broker, test_cfg, tmp_path):
    """(a cluster on fresh topics with no worker started, the replicator processes to stop,
    the replicator's log file), from and back to clean replication state."""
    with replicator_process.mesh(meta, zones, broker, test_cfg, tmp_path, PARTITIONS, tail=40) as mesh:
        yield mesh


def _wait(cond, what: str, timeout: float = 20.0, step: float = 0.05):
    return wait_until(cond, timeout, what, step=step)


def _count(inst, sql: str) -> int:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0])


def _big_transaction(conn) -> str:
    """Zone a's 20,060-row transaction over two tables (inserts, updates, deletes, in chunks
    of rows events); returns its GTID."""
    conn.begin()
    with conn.cursor() as cur:
        for n, start in enumerate(range(0, T1_TENANTS, CHUNK)):
            ids = range(100_000 + start, 100_000 + start + CHUNK)
            cur.execute(
                "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES "
                + ",".join(f"({i}, 'big {i}', 1, 1)" for i in ids)
            )
            ids = range(200_000 + start, 200_000 + start + CHUNK)
            cur.execute(
                "INSERT INTO orders (order_id, tenant_id, amount, _zs_origin, _zs_version) VALUES "
                + ",".join(f"({i}, {i % 1000}, {i % 997}.25, 1, 1)" for i in ids)
            )
            if n == 7:  # rows the transaction changes, in its middle
                cur.execute(
                    "UPDATE tenants SET name = CONCAT(name, ' +big'), _zs_version = _zs_version + 1 "
                    f"WHERE tenant_id < {PRE_TENANTS}"
                )
                cur.execute(f"DELETE FROM orders WHERE order_id < {T1_DELETES}")
        conn.commit()
        cur.execute("SELECT @@last_gtid")
        return cur.fetchone()[0]


def test_kill_9_while_a_transaction_is_half_published(mesh, zones, meta):
    """S001-05"""
    cluster, procs, log = mesh
    conn = zones["a"].connect("zonesync_app")
    conn.autocommit(True)
    watch = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "s001-05-watch"})
    try:
        cluster.start(which=("applier",), zones=("b",))
        procs.append(replicator_process.spawn(cluster, "a", log, throttle=0.03))
        first = procs[-1]
        _wait(lambda: checkpoint_history(meta, "a"), "the replicator took its start position")

        with conn.cursor() as cur:  # small transactions first, captured and checkpointed
            for t in range(0, PRE_TENANTS, 10):
                conn.begin()
                cur.execute(
                    "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES "
                    + ",".join(f"({i}, 'pre {i}', 1, 1)" for i in range(t, t + 10))
                )
                cur.execute(
                    "INSERT INTO orders (order_id, tenant_id, amount, _zs_origin, _zs_version) VALUES "
                    + ",".join(f"({i}, {i}, 1.50, 1, 1)" for i in range(t * 2 // 5, (t + 10) * 2 // 5))
                )
                conn.commit()
        t1_file, t1_gtid_pos = binlog.position(conn)
        _wait(
            lambda: (
                (cp := checkpoint_history(meta, "a")[-1])
                and (file_number(cp.log_file), cp.log_pos)
                >= (
                    file_number(t1_file),
                    t1_gtid_pos,
                )
            ),
            "the small transactions were checkpointed",
        )
        base = published(cluster, "a", watch)

        gtid = _big_transaction(conn)
        span = transaction_span(conn, t1_file, t1_gtid_pos)
        # kill -9 once the broker holds some of its messages (the throttled replicator needs
        # over a second to publish all ~40 of them)
        _wait(
            lambda: published(cluster, "a", watch) >= base + 10,
            "the replicator began publishing the big transaction",
            step=0.005,
        )
        replicator_process.kill(first)
    finally:
        watch.close()

    # What the broker holds of the transaction: a part of it, never all
    before = copies_by_lsn(cluster, "a")
    t1_before = {lsn for lsn, copies in before.items() if copies[0].txn_id == gtid}
    assert 0 < len(t1_before) < T1_ROWS, f"{len(t1_before)} of {T1_ROWS} events published before the kill"
    assert all(len(copies) == 1 for copies in before.values())
    checkpoints = checkpoint_history(meta, "a")
    assert_at_boundaries(conn, checkpoints, span)
    at_kill = checkpoints[-1]
    assert (file_number(at_kill.log_file), at_kill.log_pos) <= (file_number(t1_file), span[1]), (
        "the checkpoint at the kill is before the big transaction"
    )
    # b applied what reached the broker: a part of the transaction
    last = {}
    for lsn, copies in before.items():
        last[copies[0].partition] = max(last.get(copies[0].partition, 0), lsn)
    _wait(lambda: applied_through(zones["b"], "a", last), "b applied what the broker holds")
    in_b = _count(zones["b"], "SELECT COUNT(*) FROM tenants WHERE tenant_id >= 100000") + _count(
        zones["b"], "SELECT COUNT(*) FROM orders WHERE order_id >= 200000"
    )
    assert 0 < in_b < T1_TENANTS + T1_ORDERS, f"b holds {in_b} of the transaction's new rows"

    with conn.cursor() as cur:  # written while the replicator is down
        for i in range(POST):
            cur.execute("UPDATE tenants SET name = 'post', _zs_version = _zs_version + 1 WHERE tenant_id = %s", (i,))

    started = time.monotonic()
    procs.append(replicator_process.spawn(cluster, "a", log))
    cluster.start(which=("applier",), zones=("c",))
    sums = wait_converged(zones, timeout=30)
    converged_in = time.monotonic() - started

    # exactly a's rows and versions, in b and c (wait_converged compared every column)
    total = PRE_TENANTS + PRE_ORDERS + T1_ROWS + POST
    assert len(sums["tenants"]["c"]) == PRE_TENANTS + T1_TENANTS
    assert len(sums["orders"]["c"]) == PRE_ORDERS - T1_DELETES + T1_ORDERS
    assert sums["tenants"]["b"] == checksum(zones["a"], "tenants")
    versions = {r[0]: r[4] for r in sums["tenants"]["c"] if r[0] < PRE_TENANTS}
    assert versions == {i: (3 if i < POST else 2) for i in range(PRE_TENANTS)}, "each update applied once"

    # the restart re-read the whole transaction: every event of it published again, identical
    after = copies_by_lsn(cluster, "a")
    assert len(after) == total, f"{len(after)} distinct LSNs, {total} changes"
    t1_after = {lsn for lsn, copies in after.items() if copies[0].txn_id == gtid}
    assert len(t1_after) == T1_ROWS
    twice = {lsn for lsn, copies in after.items() if len(copies) == 2}
    assert twice == t1_before, "re-published: exactly the part of the transaction the broker held"
    assert all(len(copies) <= 2 for copies in after.values())
    for lsn in twice:
        first_copy, second_copy = (msgspec.structs.replace(e, is_retry=False) for e in after[lsn])
        assert first_copy == second_copy, f"the re-published event {lsn} differs from its first copy"

    # the appliers skipped the copies: each applied every change once
    _wait(lambda: cluster.appliers["c"].applied >= total, "c counted its applied events", timeout=5)
    assert cluster.appliers["b"].applied == total
    assert cluster.appliers["c"].applied == total
    for z in ("b", "c"):
        assert alerts(meta, z, "row_locked") == [] and alerts(meta, z, "partition_halted") == []

    # and every checkpoint since, too, lies at a boundary; the last one past the transaction
    checkpoints = checkpoint_history(meta, "a")
    assert_at_boundaries(conn, checkpoints, span)
    assert (file_number(checkpoints[-1].log_file), checkpoints[-1].log_pos) >= (file_number(t1_file), span[2])
    conn.close()
    print(f"{len(t1_before)} of {T1_ROWS} events published before the kill; converged {converged_in:.1f} s after")
