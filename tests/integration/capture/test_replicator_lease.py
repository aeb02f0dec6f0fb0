"""Who may capture a zone: one replicator per zone at a time (S001-11), one binlog reader
per server_id (S003-01), and no silent restart at the binlog end when a zone's
checkpoints are gone (S001-09)."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from pymysqlreplication import BinLogStreamReader

from tests.support.background import wait_until
from tests.support.replication import alerts, insert_tenants, latest_checkpoint, replicator_alone
from zonesync import cli
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.capture.lease import LeaseLost, ReplicatorLease, new_holder
from zonesync.capture.start import BootstrapRefused, NoCheckpoint, bootstrap

pytestmark = pytest.mark.integration


def _checkpoints(meta, zone: str) -> int:
    return meta.run("SELECT COUNT(*) FROM replicator_checkpoints WHERE zone = %s", (zone,))[0][0][0]


def test_a_second_replicator_of_a_zone_stands_by_and_takes_over(zone_a_alone, zones, meta):
    """Two replicators of zone a (a failover overlap): one captures, the other waits; when
    the first dies without releasing its lease, the second takes over once it expires and
    zone b still ends up with every row exactly once."""
    conn, cluster = zone_a_alone
    first = cluster.make_replicator("a")
    first.lease.ttl = 2.0
    cluster.replicators["a"] = first
    cluster._run("replicator-a", first)
    cluster.wait_started()
    second = cluster.make_replicator("a")
    second.lease.ttl = 2.0
    runner = threading.Thread(target=second.run, kwargs={"max_seconds": 25}, daemon=True)
    runner.start()
    cluster.start(which=("applier",), zones=("b",))
    try:
        insert_tenants(conn, 1, 50)
        deadline = time.monotonic() + 15
        while _count(zones["b"]) < 50:
            assert time.monotonic() < deadline, f"zone b did not get the first rows: published {first.published}"
            time.sleep(0.1)
        assert first.published >= 50
        assert second.published == 0, "the standby read nothing"
        assert second.standby_for == first.lease.holder

        # The holder dies: it stops reading and never releases its lease (as under kill -9
        # in another process; here the lease simply runs out).
        first.lease.release = lambda: None
        cluster.stop("replicator-a")
        insert_tenants(conn, 51, 50)
        deadline = time.monotonic() + 15
        while _count(zones["b"]) < 100:
            assert time.monotonic() < deadline, "the standby did not take over"
            time.sleep(0.1)
        assert second.standby_for is None
        assert second.published >= 50
        holder = meta.run("SELECT holder FROM replicator_leases WHERE zone = 'a'")[0][0][0]
        assert holder == second.lease.holder
    finally:
        second.stop()
        runner.join(20)
    assert meta.run("SELECT COUNT(*) FROM replicator_leases WHERE zone = 'a'")[0][0][0] == 0, "released on stop"
    with zones["b"].connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*), COUNT(DISTINCT tenant_id), SUM(_zs_version) FROM tenants")
        assert cur.fetchone() == (100, 100, sum(t + 1 for t in range(1, 101)))


def _count(inst) -> int:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM tenants")
        return cur.fetchone()[0]


def test_a_deposed_holder_can_never_save_a_checkpoint(meta):
    """The fence: a holder paused past its lease (SIGSTOP, cut off from meta) comes back
    after another process took over. Its next checkpoint is refused with the renewal in
    the same transaction, and it learns that it is now the standby."""
    zone = "zl"
    meta.run("DELETE FROM replicator_leases WHERE zone = %s", (zone,))
    meta.run("DELETE FROM replicator_checkpoints WHERE zone = %s", (zone,))
    old, new = ReplicatorLease(meta, zone, 9001, ttl=5), ReplicatorLease(meta, zone, 9002, ttl=5)
    store = CheckpointStore(meta, zone, lease=old)
    try:
        assert old.acquire() is None
        store.save(Checkpoint(zone, 10, "binlog.000001", 100, {0: 10}, 10))
        assert new.acquire() == old.holder, "a live lease is not taken"
        meta.run("UPDATE replicator_leases SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE zone = %s", (zone,))
        assert new.acquire() is None, "an expired lease is taken over"
        with pytest.raises(LeaseLost):
            store.save(Checkpoint(zone, 20, "binlog.000001", 200, {0: 20}, 20))
        assert [cp.lsn for cp in store.history()] == [10], "the deposed holder's checkpoint never landed"
        assert old.acquire() == new.holder, "the deposed holder is a standby now"
        old.release()
        assert meta.run("SELECT holder FROM replicator_leases WHERE zone = %s", (zone,))[0][0][0] == new.holder
    finally:
        store.close()
        meta.run("DELETE FROM replicator_leases WHERE zone = %s", (zone,))
        meta.run("DELETE FROM replicator_checkpoints WHERE zone = %s", (zone,))


def test_the_lease_of_a_dead_process_on_this_host_is_taken_at_once(meta):
    """After kill -9 a restarted replicator does not wait out the TTL: the holder's
    process is gone from this host. A live process's lease is respected."""
    zone = "zl"
    dead = subprocess.Popen(["true"])
    dead.wait()
    dead_holder = new_holder(zone).rsplit(":", 2)[0] + f":{dead.pid}:dead00"
    live_holder = new_holder(zone)  # this process: alive
    try:
        for holder, taken in ((dead_holder, True), (live_holder, False)):
            meta.run("DELETE FROM replicator_leases WHERE zone = %s", (zone,))
            meta.run(
                "INSERT INTO replicator_leases (zone, holder, server_id, expires_at) "
                "VALUES (%s, %s, 1, NOW(6) + INTERVAL 60 SECOND)",
                (zone, holder),
            )
            got = ReplicatorLease(meta, zone, 9003).acquire()
            assert (got is None) is taken, (holder, got)
    finally:
        meta.run("DELETE FROM replicator_leases WHERE zone = %s", (zone,))


def test_a_reader_already_using_the_server_id_is_not_cut_off(zone_a_alone, zones, meta):
    """S003-01: a native replica (or any registered reader) of zone a uses the server_id
    the replicator is configured with. The replicator reads nothing and alerts, instead
    of taking the stream from the other reader (MariaDB keeps the newest connection of a
    server_id); once the other reader is gone it captures normally."""
    conn, cluster = zone_a_alone
    server_id = cluster.make_replicator("a").server_id
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    other = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": zones["a"].port, "user": "root", "passwd": ""},
        server_id=server_id,
        report_slave="native-replica-7",
        resume_stream=True,
        log_file=file,
        log_pos=pos,
        blocking=True,
        slave_heartbeat=0.25,
    )
    events, failure, stop = [], [], threading.Event()

    def read():
        try:
            for ev in other:
                events.append(ev)
                if stop.is_set():
                    return
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            failure.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while not _registered(conn, server_id):
            assert time.monotonic() < deadline, "the other reader did not register"
            time.sleep(0.1)
        insert_tenants(conn, 1, 3)
        replicator = replicator_alone(cluster, "a", seconds=4)
        assert replicator.published == 0
        assert not failure, f"the other reader was cut off: {failure}"
        found = alerts(meta, "a", "server_id_clash")
        assert len(found) == 1, "one alert, however often it asks again"
        assert found[0]["server_id"] == server_id and found[0]["other_reader"] == "native-replica-7"
    finally:
        stop.set()
        insert_tenants(conn, 100, 1)  # wakes the reader so it sees stop
        reader.join(10)
        other.close()
    deadline = time.monotonic() + 10
    while _registered(conn, server_id):
        assert time.monotonic() < deadline, "the other reader stayed registered"
        time.sleep(0.1)
    insert_tenants(conn, 200, 2)
    assert replicator_alone(cluster, "a", seconds=4).published >= 2, "with the clash gone, it captures"


def test_an_unregistered_reader_with_the_server_id_is_alerted_once_and_cut_off(zone_a_alone, zones, meta):
    """S003-01, a reader that never registers (no report_slave, so SHOW SLAVE HOSTS cannot
    show it) connects with the running replicator's server_id: the server drops the
    replicator for it (error 4052). The replicator raises one server_id_clash alert naming
    an unregistered reader, waits, finds no registered reader with the id, and connects
    again, which cuts the other reader off once (the server keeps the newest connection).
    Nothing written meanwhile is lost: every row reaches the topic."""
    conn, cluster = zone_a_alone
    replicator = cluster.make_replicator("a")
    cluster.replicators["a"] = replicator
    cluster._run("replicator-a", replicator)
    cluster.wait_started()
    insert_tenants(conn, 1, 3)
    wait_until(lambda: replicator.published >= 3, 10, "the replicator captures")
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    other = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": zones["a"].port, "user": "root", "passwd": ""},
        server_id=replicator.server_id,
        resume_stream=True,
        log_file=file,
        log_pos=pos,
        blocking=True,
    )
    failure: list[Exception] = []

    def read():
        try:
            for _ in other:
                pass
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            failure.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: alerts(meta, "a", "server_id_clash"), 15, "the replicator, cut off, alerts")
        found = alerts(meta, "a", "server_id_clash")
        assert found[0]["server_id"] == replicator.server_id
        assert "did not register" in found[0]["other_reader"], found
        insert_tenants(conn, 10, 5)  # written while the other reader holds the stream
        wait_until(lambda: failure, 20, "the replicator connects again and cuts the other reader off")
        assert getattr(failure[0], "args", [None])[0] == 4052, failure
        wait_until(lambda: replicator.published >= 8, 15, "the rows written meanwhile are published")
        assert len(alerts(meta, "a", "server_id_clash")) == 1, "one alert"
    finally:
        other.close()
        reader.join(10)


def _registered(conn, server_id: int) -> bool:
    with conn.cursor() as cur:
        cur.execute("SHOW SLAVE HOSTS")
        return any(int(r[0]) == server_id for r in cur.fetchall())


def test_a_zone_whose_checkpoints_were_lost_is_refused_until_bootstrapped(zone_a_alone, meta, capsys):
    """S001-09: zone a was captured, then meta lost its checkpoints. The replicator does
    not start at the binlog end (that would skip what was written meanwhile): it refuses,
    naming the zone, with a `no_checkpoint` alert. Bootstrap sets the start explicitly;
    it is refused while checkpoints exist."""
    conn, cluster = zone_a_alone
    replicator_alone(cluster, "a", seconds=2)
    assert latest_checkpoint(meta, "a") is not None
    meta.run("DELETE FROM replicator_checkpoints WHERE zone = 'a'")
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    insert_tenants(conn, 1, 5)  # written while capture had no checkpoint

    replicator = cluster.make_replicator("a")
    with pytest.raises(NoCheckpoint, match="zone a has been captured since"):
        replicator.run(max_seconds=5)
    assert replicator.published == 0
    assert _checkpoints(meta, "a") == 0, "no new start was taken at the binlog end"
    assert len(alerts(meta, "a", "no_checkpoint")) == 1
    assert meta.run("SELECT COUNT(*) FROM replicator_leases WHERE zone = 'a'")[0][0][0] == 0, "lease released"

    assert _bootstrap(capsys, "binlog.000001") == (2, "--at: give FILE:POS")
    assert _bootstrap(capsys, f"{file}:999999999")[0] == 2, "a position past the file's end"
    assert _bootstrap(capsys, f"{file}:{pos}")[0] == 0
    assert _checkpoints(meta, "a") == 1
    with pytest.raises(BootstrapRefused, match="already has checkpoints"):
        bootstrap(meta, "a", file, int(pos), "test: a second start")
    assert replicator_alone(cluster, "a", seconds=3).published == 5, "the rows written meanwhile are captured"


def _bootstrap(capsys, at: str) -> tuple[int, str]:
    """`zonesync binlog bootstrap --zone a --at AT`: (exit code, the first words it printed)."""
    code = cli.main(["binlog", "bootstrap", "--zone", "a", "--at", at])
    out = capsys.readouterr()
    return code, (out.out + out.err)[:19]
