"""`zonesync zones set-primary`'s refusals and the replica's binlog retention (seed S001-10).

One private `zonesync dev up` for the module, with a GTID replica of zone a. The tests
run in file order, each from where the last left the environment: first what is refused
while nothing has failed (bad arguments, a replica still replicating), the replica's safe
purge, then a replica that missed transactions capture had already read: refused, then
promoted with --allow-lost, and capture goes on there. Every refusal is one line, exit 2,
and changes nothing in meta.
"""

from __future__ import annotations

import subprocess

import pymysql
import pytest

from tests.support.private_env import ZS, private_dev_env
from zonesync.capture import gtid, segments
from zonesync.capture.checkpoints import CheckpointStore
from zonesync.dev import env as dev_stack
from zonesync.dev import procs
from zonesync.dev import replica as dev_replica
from zonesync.meta import alerts

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    state = tmp_path_factory.mktemp("failover") / "state"
    # rows written as root in zone a, under no rules: the appliers check no owners
    with private_dev_env(state, ports=40, partitions=2, ZONESYNC_APPLY_CHECK_OWNERS="0") as (env, cfg):
        replica = dev_replica.start(cfg, "a", cfg.meta_port + 30)
        yield env, cfg, replica, dev_stack.meta_config(cfg)


def _zs(env, *args):
    return subprocess.run([ZS, *args], env=env, capture_output=True, text=True, timeout=120)


def _sql(port, statement, args=None, database="zonesync_app"):
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", database=database, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, args)
            return cur.fetchall()
    finally:
        conn.close()


def _refused(result, *words):
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and all(w in line for w in words), line


def _captured(meta, port, timeout=30):
    """Until zone a's newest checkpoint's GTID state covers the primary's binlog."""
    want = gtid.parse(_sql(port, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0])

    def covered():
        store = CheckpointStore(meta, "a")
        try:
            cp = store.latest()
        finally:
            store.close()
        return cp is not None and cp.gtid_pos is not None and gtid.covers_all(gtid.parse(cp.gtid_pos), want)

    assert procs.wait_until(covered, timeout), "zone a's replicator did not checkpoint the writes"


def test_bad_arguments_are_refused_with_one_line(world):
    env, _cfg, replica, meta = world
    _refused(_zs(env, "zones", "set-primary", "a", "nowhere"), "HOST:PORT", "not host:port")
    _refused(_zs(env, "zones", "set-primary", "zz", f"127.0.0.1:{replica.port}"), "ZONE", "ZONESYNC_ZONES")
    _refused(_zs(env, "zones", "set-primary", "a"), "name the zone and its new primary")
    assert [s.segment for s in segments.history(meta, "a")] == [0]


def test_a_replica_still_replicating_is_refused(world):
    env, _cfg, replica, meta = world
    result = _zs(env, "zones", "set-primary", "a", f"127.0.0.1:{replica.port}")
    _refused(result, "still replicates from", "STOP ALL SLAVES")
    assert [s.segment for s in segments.history(meta, "a")] == [0]


def test_the_replicas_safe_purge_keeps_its_binlog_from_the_needed_checkpoints_gtid_position(world):
    env, cfg, replica, meta = world
    primary = cfg.zone("a").port
    for i in range(4):  # several files on the replica, the checkpoint's GTID in the newest
        _sql(primary, "INSERT INTO tenants (tenant_id, name) VALUES (%s, 'p')", (100 + i,))
        dev_replica.wait_caught_up(replica, dev_replica.primary_instance(cfg, "a"), 30)
        _sql(replica.port, "FLUSH BINARY LOGS")
    _captured(meta, primary)
    files = [r[0] for r in _sql(replica.port, "SHOW BINARY LOGS")]
    dry = _zs(env, "binlog", "safe-purge", "--zone", "a", "--replica", f"127.0.0.1:{replica.port}", "--dry-run")
    assert dry.returncode == 0 and "would purge" in dry.stdout, dry.stdout + dry.stderr
    assert [r[0] for r in _sql(replica.port, "SHOW BINARY LOGS")] == files, "a dry run purged"
    done = _zs(env, "binlog", "safe-purge", "--zone", "a", "--replica", f"127.0.0.1:{replica.port}")
    assert done.returncode == 0 and "purged the replica's binlogs before" in done.stdout, done.stdout + done.stderr
    kept = [r[0] for r in _sql(replica.port, "SHOW BINARY LOGS")]
    assert len(kept) < len(files), (files, kept)
    # every checkpoint a consumer may need is still found in what the replica kept
    store = CheckpointStore(meta, "a")
    try:
        cp = store.latest()
    finally:
        store.close()
    conn = pymysql.connect(host="127.0.0.1", port=replica.port, user="root")
    try:
        found = gtid.locate(conn, gtid.parse(cp.gtid_pos), where="the replica")
        assert found[0] in kept
        # a replica that purged past a checkpoint is refused for it: the position is gone there
        _sql(primary, "INSERT INTO tenants (tenant_id, name) VALUES (110, 'p')")
        dev_replica.wait_caught_up(replica, dev_replica.primary_instance(cfg, "a"), 30)

        def purged_to_newest():  # (the server keeps a file until its binlog checkpoint moves past it)
            with conn.cursor() as cur:
                cur.execute("FLUSH BINARY LOGS")
                cur.execute("SHOW MASTER STATUS")
                cur.execute(f"PURGE BINARY LOGS TO '{cur.fetchone()[0]}'")
                cur.execute("SHOW BINARY LOGS")
                return len(cur.fetchall()) == 1

        assert procs.wait_until(purged_to_newest, 30)
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            oldest = cur.fetchone()[0]
        head = next(info for _p, kind, _e, info in gtid._events(conn, oldest) if kind == "Gtid_list")
        earlier = {d: (s, n - 1) for d, (s, n) in gtid.parse(head).items()}
        assert earlier, head
        with pytest.raises(gtid.BinlogGone, match="purged what capture needs"):
            gtid.locate(conn, earlier, where="the replica")
    finally:
        conn.close()


def test_a_replica_that_missed_captured_transactions_is_refused_then_promoted_with_allow_lost(world):
    env, cfg, replica, meta = world
    primary = cfg.zone("a").port
    b = cfg.zone("b").port
    _sql(replica.port, "STOP SLAVE IO_THREAD")  # the replica stops receiving: what follows it misses
    for i in range(3):
        _sql(primary, "INSERT INTO tenants (tenant_id, name) VALUES (%s, 'missed')", (200 + i,))
    _captured(meta, primary)
    assert procs.wait_until(lambda: len(_sql(b, "SELECT 1 FROM tenants WHERE tenant_id >= 200")) == 3, 30)
    dev_replica.promote(replica)
    before = segments.history(meta, "a")

    # the old primary still answers and accepts writes: two primaries, refused
    _refused(_zs(env, "zones", "set-primary", "a", f"127.0.0.1:{replica.port}"), "still answers and accepts writes")
    _sql(primary, "SET GLOBAL read_only = ON", database=None)
    # the replica lacks what capture already sent to the other zones: refused, naming them
    lost = _zs(env, "zones", "set-primary", "a", f"127.0.0.1:{replica.port}")
    _refused(lost, "lacks transactions capture already read", "--allow-lost")
    assert segments.history(meta, "a") == before, "a refusal changed meta"

    # the promoted replica is written before the mapping: its own transactions (under its
    # own server id, numbered on from where it stopped receiving) must be captured
    _sql(replica.port, "INSERT INTO tenants (tenant_id, name) VALUES (299, 'before the mapping')")
    forced = _zs(env, "zones", "set-primary", "a", f"127.0.0.1:{replica.port}", "--allow-lost", "--reason", "t")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "LOST" in forced.stdout, forced.stdout
    kinds = [a["kind"] for a in alerts.open_alerts(meta, zone="a")]
    assert "failover_lost_transactions" in kinds and "primary_promoted" in kinds, kinds
    again = _zs(env, "zones", "set-primary", "a", f"127.0.0.1:{replica.port}")
    assert again.returncode == 0 and "already" in again.stdout, again.stdout  # a second run: nothing to do

    # capture goes on at the new primary: a row written there reaches zone b
    _sql(replica.port, "INSERT INTO tenants (tenant_id, name) VALUES (300, 'after')")
    assert procs.wait_until(lambda: _sql(b, "SELECT name FROM tenants WHERE tenant_id = 300") == (("after",),), 60)
    assert _sql(b, "SELECT name FROM tenants WHERE tenant_id = 299") == (("before the mapping",),)
    listed = _zs(env, "zones", "primaries", "a")
    assert "LOST" in listed.stdout and f"127.0.0.1:{replica.port}" in listed.stdout, listed.stdout
