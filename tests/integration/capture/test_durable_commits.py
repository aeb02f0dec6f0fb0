"""Seed S002-04 (在异机模式下，commit 的同时，直接写入 binlog … 保证 RPO=0): committed means
durable. A zone whose server runs as production zones do (sync_binlog=1,
innodb_flush_log_at_trx_commit=1) has its mariadbd killed -9 while clients are committing;
every commit acknowledged to a client before the kill is in its binlog after the restart,
and is replicated to zone b.

Zone a is a mariadbd of this test alone (its own datadir and port), started with both
durability settings at 1 (development zones run with 0 and 2 for speed); its replicator
and zone b's applier run in this process throughout, across the crash. Four clients commit
single-row and two-row transactions as fast as they can and note each commit the server
acknowledged; the server is killed -9 once 300 are acknowledged, with commits still in
flight. After crash recovery:

- the replicator sees a durable zone (no durability warning);
- every acknowledged commit is in zone a's table and in its binlog (read from where the
  burst began), and the table and the binlog agree on every row the clients wrote (a
  commit in flight at the kill is in both or in neither);
- zone b ends with exactly zone a's rows: every acknowledged commit among them.

A kill -9 of the process (not of the machine) loses nothing the server wrote to its files
even without fsync, so what this shows is the crash recovery that keeps binlog and engine
in step, and capture resuming after it; the settings are what makes the same true of a
machine crash.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from dataclasses import dataclass

import pymysql
import pytest
from pymysqlreplication.row_event import WriteRowsEvent

from tests.support.background import wait_until
from tests.support.binlog import open_stream, position
from tests.support.replication import Cluster, alerts, checksum, reset_state
from zonesync.capture.source import SourceDB
from zonesync.dev import env, mariadb, procs

pytestmark = pytest.mark.integration

WRITERS = 4
ACKED_BEFORE_KILL = 300
DURABLE = {"--sync-binlog": "1", "--innodb-flush-log-at-trx-commit": "1"}


@dataclass(frozen=True)
class DurableInstance(mariadb.Instance):
    """A zone's mariadbd as production runs it: every commit synced to the binlog and the redo log."""

    def argv(self) -> list[str]:
        out = [f"{a.split('=', 1)[0]}={DURABLE[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in DURABLE else a
               for a in super().argv()]  # fmt: skip
        assert all(f"{k}={v}" in out for k, v in DURABLE.items())
        return out


@pytest.fixture
def durable_zone_a(zones, meta, broker, test_cfg):
    """(the durable mariadbd standing in for zone a, its process, a cluster on fresh topics with
    a's instance in place of the shared one and no worker started)."""
    inst = DurableInstance(
        "durable-zone-a", procs.free_port(), 202, test_cfg.data_dir / "durable-zone-a", gtid_domain_id=1
    )
    server = mariadb.start(inst, test_cfg.run_dir, test_cfg.log_dir, test_cfg.data_dir)
    cluster = None
    try:
        for path in [*sorted(env.ZONE_BOOKKEEPING.glob("*.sql")), env.SAMPLE_SCHEMA]:
            env._run_sql_file(inst, path)
        mesh = {**zones, "a": inst}
        reset_state(mesh, meta)
        cluster = Cluster(mesh, meta, broker, test_cfg.broker_file)
        yield inst, server, cluster
    finally:
        if cluster is not None:
            cluster.stop()
        procs.stop(test_cfg.run_dir, inst.name)
        shutil.rmtree(inst.datadir, ignore_errors=True)
        reset_state(zones, meta)


class Client(threading.Thread):
    """Commits transactions into zone a until the server goes away: even ones insert one
    tenant (autocommit), odd ones two (BEGIN .. COMMIT); `acked` holds the tenant ids of
    every commit that returned."""

    def __init__(self, inst, n: int):
        super().__init__(daemon=True, name=f"client-{n}")
        self.inst, self.n = inst, n
        self.acked: list[int] = []
        self.error: Exception | None = None

    def run(self) -> None:
        conn = self.inst.connect("zonesync_app")
        sql = "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, %s, 1, 1)"
        try:
            with conn.cursor() as cur:
                for t in range(100_000):
                    first = (self.n + 1) * 1_000_000 + 2 * t
                    if t % 2 == 0:
                        cur.execute(sql, (first, f"c{self.n}"))
                        self.acked.append(first)
                    else:
                        conn.begin()
                        cur.execute(sql, (first, f"c{self.n}"))
                        cur.execute(sql, (first + 1, f"c{self.n}"))
                        conn.commit()
                        self.acked += [first, first + 1]
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as exc:
            self.error = exc  # the server went away: this commit was not acknowledged
        finally:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - the connection died with the server
                pass


def _wait(cond, what: str, timeout: float = 30.0, step: float = 0.05):
    return wait_until(cond, timeout, what, step=step)


def _written_ids(inst) -> set[int]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT tenant_id FROM tenants")
        return {r[0] for r in cur.fetchall()}


def test_acknowledged_commits_survive_a_kill_9_of_a_durable_zone(durable_zone_a, test_cfg, zones, meta):
    """S002-04"""
    inst, server, cluster = durable_zone_a
    with inst.connect().cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.innodb_flush_log_at_trx_commit")
        assert cur.fetchone() == (1, 1)
    assert SourceDB("127.0.0.1", inst.port, "root", "", ["zonesync_app"]).check_capture_settings() == [], (
        "the replicator sees a durable zone"
    )
    cluster.start(which=("replicator",), zones=("a",))
    cluster.start(which=("applier",), zones=("b",))
    cluster.wait_started()
    conn = inst.connect()
    start = position(conn)
    conn.close()

    clients = [Client(inst, n) for n in range(WRITERS)]
    for c in clients:
        c.start()
    _wait(lambda: sum(len(c.acked) for c in clients) >= ACKED_BEFORE_KILL, "the clients committed", timeout=60)
    os.kill(server.pid, signal.SIGKILL)  # right after the burst's acknowledged commits, others in flight
    server.proc.wait(10)
    for c in clients:
        c.join(30)
        assert not c.is_alive() and c.error is not None, f"{c.name} saw the server go"
    acked = {t for c in clients for t in c.acked}
    assert len(acked) >= ACKED_BEFORE_KILL

    mariadb.start(inst, test_cfg.run_dir, test_cfg.log_dir, test_cfg.data_dir)  # crash recovery
    in_table = _written_ids(inst)
    missing = sorted(acked - in_table)
    assert not missing, f"{len(missing)} acknowledged commits lost by the crash, e.g. {missing[:5]}"

    stream = open_stream(inst, start, 5902, [WriteRowsEvent])
    try:
        in_binlog = [r["values"]["tenant_id"] for ev in stream if ev.table == "tenants" for r in ev.rows]
    finally:
        stream.close()
    assert len(in_binlog) == len(set(in_binlog)), "each commit once in the binlog"
    assert acked <= set(in_binlog), "every acknowledged commit is in the binlog after the restart"
    assert set(in_binlog) == in_table, "after recovery the table and the binlog hold the same commits"

    # replicated: the replicator and the applier carried on across the crash
    _wait(lambda: checksum(zones["b"]) == checksum(inst), "zone b converged with zone a", timeout=60, step=0.2)
    assert acked <= {r[0] for r in checksum(zones["b"])}
    assert alerts(meta, "b", "partition_halted") == [] and alerts(meta, "b", "row_locked") == []
    print(f"{len(acked)} commits acknowledged before the kill, {len(in_table) - len(acked)} more recovered in flight")
