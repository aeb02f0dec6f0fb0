"""Seed S002-11 (大事务如何更好地支持), the crash part: the replicator is killed -9 while it
streams a transaction larger than its large-transaction limit (lowered to LIMIT rows here,
so a transaction of a few thousand rows is "large").

Such a transaction is read twice: the first read only counts it (nothing is published and
the pass ends at its Xid), the second queues each rows event as it is read. The kill lands
in the second read, once part of it is on the broker. Zone a's replicator runs as a process
of its own (tests/support/replicator_process.py, started with the limit lowered and every
produce slowed, so the kill lands inside the streaming); zone b's applier runs throughout
and applies the part that arrived. What must hold:

- no checkpoint ever points inside the transaction (every checkpoint is at a transaction
  boundary of the binlog), and the one standing at the kill is before its GTID event;
- after the restart every row of the transaction arrives in b exactly once: b ends with
  exactly a's rows, its applier applied every change once (the copies re-published after
  the restart, identical to their first copies, were skipped), and `zonesync reconcile`
  finds the published and committed counts equal in every partition;
- every event of the transaction carries its row count and a row index of its own.
"""

from __future__ import annotations

import msgspec
import pytest
from confluent_kafka import Consumer

from tests.support import replicator_process
from tests.support.background import wait_until
from tests.support.binlog import assert_at_boundaries, position, transaction_span
from tests.support.replication import (
    alerts,
    applied_through,
    checkpoint_history,
    checksum,
    settled_reconciliation,
)
from tests.support.topics import copies_by_lsn, published
from zonesync.apply.tools.reconcile import OK
from zonesync.events import file_number

pytestmark = pytest.mark.integration

PARTITIONS = 4
LIMIT = 300  # the replicator's large_txn_rows in this test
PRE = 20  # tenants 0..19, small transactions before the large one
BIG_INSERTS = 4000  # tenants 100001..104000, inserted by the large transaction
BIG_ROWS = BIG_INSERTS + PRE  # it also updates the PRE tenants
POST = 3  # single-row updates after it
THROTTLE = 0.05  # seconds after each message the first process produces


@pytest.fixture
def mesh(meta, zones, broker, test_cfg, tmp_path):
    """(a cluster on fresh topics with no worker started, the replicator processes to stop,
    their log), from and back to clean replication state."""
    with replicator_process.mesh(meta, zones, broker, test_cfg, tmp_path, PARTITIONS) as mesh:
        yield mesh


def _wait(cond, what: str, timeout: float = 30.0, step: float = 0.05):
    return wait_until(cond, timeout, what, step=step)


def test_kill_9_while_a_large_transaction_is_streamed(mesh, zones, meta):
    """S002-11"""
    cluster, started, log = mesh
    conn = zones["a"].connect("zonesync_app")
    watch = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "capture-crash-watch"})
    try:
        cluster.start(which=("applier",), zones=("b",))
        started.append(replicator_process.spawn(cluster, "a", log, throttle=THROTTLE, large_txn_rows=LIMIT))
        _wait(lambda: checkpoint_history(meta, "a"), "the replicator took its start position")
        with conn.cursor() as cur:
            for t in range(PRE):
                cur.execute(
                    "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, 'pre', 1, 1)", (t,)
                )
        big_file, big_start = position(conn)
        _wait(
            lambda: (
                (cp := checkpoint_history(meta, "a")[-1])
                and (file_number(cp.log_file), cp.log_pos) >= (file_number(big_file), big_start)
            ),
            "the small transactions were checkpointed",
        )
        base = published(cluster, "a", watch)

        conn.begin()
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) "
                f"SELECT 100000 + seq, CONCAT('big ', seq), 1, 1 FROM seq_1_to_{BIG_INSERTS}"
            )
            cur.execute("UPDATE tenants SET name = 'pre +big', _zs_version = 2 WHERE tenant_id < %s", (PRE,))
            conn.commit()
            cur.execute("SELECT @@last_gtid")
            gtid = cur.fetchone()[0]
        span = transaction_span(conn, big_file, big_start)
        # kill -9 once part of it is on the broker: it is streamed, the first read published nothing
        _wait(lambda: published(cluster, "a", watch) >= base + 3, "the streaming began", step=0.005)
        replicator_process.kill(started[-1])
    finally:
        watch.close()

    before = copies_by_lsn(cluster, "a")
    big_before = {lsn for lsn, copies in before.items() if copies[0].txn_id == gtid}
    assert 0 < len(big_before) < BIG_ROWS, f"{len(big_before)} of {BIG_ROWS} rows published before the kill"
    checkpoints = checkpoint_history(meta, "a")
    assert_at_boundaries(conn, checkpoints, span)
    at_kill = checkpoints[-1]
    assert (file_number(at_kill.log_file), at_kill.log_pos) <= (file_number(big_file), span[1]), (
        "the checkpoint at the kill is before the large transaction"
    )
    # b applies the part that arrived (held for its transaction's end, then applied in parts)
    last: dict[int, int] = {}
    for lsn, copies in before.items():
        last[copies[0].partition] = max(last.get(copies[0].partition, 0), lsn)
    _wait(lambda: applied_through(zones["b"], "a", last), "b applied what the broker holds")

    with conn.cursor() as cur:  # written while no replicator runs
        for t in range(POST):
            cur.execute("UPDATE tenants SET name = 'post', _zs_version = 3 WHERE tenant_id = %s", (t,))
    started.append(replicator_process.spawn(cluster, "a", log, large_txn_rows=LIMIT))
    _wait(lambda: checksum(zones["b"]) == checksum(zones["a"]), "b converged with a", timeout=60, step=0.2)
    rows = checksum(zones["b"])
    assert len(rows) == PRE + BIG_INSERTS
    assert {r[0]: (r[1], r[4]) for r in rows if r[0] < PRE} == {
        t: ("post", 3) if t < POST else ("pre +big", 2) for t in range(PRE)
    }

    # every event of the transaction: once more after the restart where it had gone out before
    after = copies_by_lsn(cluster, "a")
    big = {lsn: copies for lsn, copies in after.items() if copies[0].txn_id == gtid}
    assert len(big) == BIG_ROWS and len(after) == PRE + BIG_ROWS + POST
    assert {lsn for lsn, copies in big.items() if len(copies) > 1} == big_before
    assert all(len(copies) <= 2 for copies in after.values())
    for lsn, copies in after.items():
        if len(copies) == 2:
            assert copies[1].is_retry, f"LSN {lsn} published again without is_retry"
            first, again = (msgspec.structs.replace(e, is_retry=False) for e in copies)
            assert first == again, f"the re-published event {lsn} differs from its first copy"
    assert {copies[0].row_count for copies in big.values()} == {BIG_ROWS}
    assert sorted(copies[0].row_index for copies in big.values()) == list(range(BIG_ROWS))

    # exactly once in b: every change applied once, the counts of both ends equal
    applier = cluster.appliers["b"]
    _wait(lambda: applier.applied >= PRE + BIG_ROWS + POST, "b counted its applied changes", timeout=10)
    assert applier.applied == PRE + BIG_ROWS + POST, "a change of the transaction was applied twice"
    reconciled = settled_reconciliation(meta, zones, "b", ["a"], timeout=20)
    assert reconciled and all(r.status == OK for r in reconciled), reconciled
    assert alerts(meta, "b", "row_locked") == [] and alerts(meta, "b", "partition_halted") == []

    # and no checkpoint since points inside it either; the last one is past it
    checkpoints = checkpoint_history(meta, "a")
    assert_at_boundaries(conn, checkpoints, span)
    assert (file_number(checkpoints[-1].log_file), checkpoints[-1].log_pos) >= (file_number(big_file), span[2])
    conn.close()
