"""S000-79: a zone goes dark (its network is cut) with changes committed but not yet
replicated. Replication of zones a, b, c runs; zone a's replicator reaches zone a only
through a TCP proxy (tests/support/tcp_proxy.py). The proxy is cut for several seconds
(open connections broken, new ones refused) while zone a's local clients go on
committing through their guard, so none of those commits leaves zone a. What must hold:

- meanwhile zone a's ZSIDs are writable nowhere else: the guards of b and c refuse writes
  to a's tenants (WrongZone, owner a), and nothing of a's cut-time commits is in b or c
  (their rows of a's tenants and their apply positions of source a stay as they were);
- the replicator keeps retrying (its thread alive, a restart logged again and again, its
  lease kept), publishes nothing, and its checkpoint stays where it was, not past what
  the topic holds; no applier halts a partition for it;
- once the link is back the same replicator resumes from that checkpoint and delivers
  every change committed during the cut, exactly once: each partition's new events chain
  on from the checkpoint's LSN, b and c converge to a (checksums), `zonesync reconcile`
  for b and c is clean, no partition halted, no row locked, no resend asked.

A second test also cuts zone a's applier from its zone (its writer's connections go
through a second proxy): zone a is dark both ways. Zones b and c go on replicating
between themselves, a's changes stay out of them and theirs out of a, and after the
links return every change reaches every zone.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from contextlib import contextmanager

import pytest

from tests.support.apply_faults import positions
from tests.support.background import wait_until
from tests.support.binlog import position
from tests.support.replication import (
    Cluster,
    latest_checkpoint,
    reset_state,
    settled_reconciliation,
    wait_converged,
)
from tests.support.tcp_proxy import TcpProxy
from tests.support.topics import topic_events
from zonesync import cli
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.tools.reconcile import OK
from zonesync.capture.source import SourceDB
from zonesync.dal import WrongZone
from zonesync.events import file_number

pytestmark = pytest.mark.integration

PARTITIONS = 4
CUT_SECONDS = 6.0
A_BEFORE = range(1, 31)  # zone a's tenants (ZSIDs 0-399), replicated before the cut
A_DARK = range(31, 111)  # inserted in zone a during the cut, each with an order
A_UPDATED = range(1, 11)  # updated in zone a during the cut
A_DELETED = range(11, 16)  # deleted in zone a during the cut
B_BEFORE, B_DARK = range(401, 411), range(411, 431)  # zone b's (ZSIDs 400-799)
C_BEFORE, C_DARK = range(801, 811), range(811, 831)  # zone c's (ZSIDs 800-1023)
RETRY_LOG = "restarting from the checkpoint"


@contextmanager
def dark_zone_a(zones, meta, broker, test_cfg, applier_too: bool = False):
    """Replication of a, b, c on fresh topics, replicator a reaching zone a through a TcpProxy
    (and, `applier_too`, applier a's writers through another): (cluster, links)."""
    reset_state(zones, meta)
    links = {"replicator": TcpProxy(zones["a"].port).start()}
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    replicator = cluster.make_replicator("a")
    replicator.source = SourceDB("127.0.0.1", links["replicator"].port, "root", "", ["zonesync_app"])
    cluster.replicators["a"] = replicator
    if applier_too:
        link = links["applier"] = TcpProxy(zones["a"].port).start()
        applier = cluster.make_applier("a")
        applier.writer_factory = lambda: ZoneWriter("127.0.0.1", link.port, "root", "", "zonesync_app")
        cluster.appliers["a"] = applier
    try:
        cluster.start()
        cluster.wait_started()
        yield cluster, links
    finally:
        for link in links.values():
            if link.is_cut:
                link.restore()
        cluster.stop()
        for link in links.values():
            link.cut()
        reset_state(zones, meta)


# -- what the zones and the broker hold ----------------------------------------------------


def _owned_by(inst, lo: int, hi: int) -> tuple:
    """(tenants, orders) of the tenants whose ZSID is in lo..hi, as zone `inst` has them."""
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT * FROM tenants WHERE tenant_id %% 1024 BETWEEN %s AND %s ORDER BY 1", (lo, hi))
        tenants = cur.fetchall()
        cur.execute("SELECT * FROM orders WHERE tenant_id %% 1024 BETWEEN %s AND %s ORDER BY 1", (lo, hi))
        return tenants, cur.fetchall()


def a_part(inst) -> tuple:
    return _owned_by(inst, 0, 399)


def b_part(inst) -> tuple:
    return _owned_by(inst, 400, 799)


def c_part(inst) -> tuple:
    return _owned_by(inst, 800, 1023)


def lease_holder(meta, zone: str):
    rows, _ = meta.run("SELECT holder FROM replicator_leases WHERE zone = %s", (zone,))
    return rows[0][0] if rows else None


def _count(inst, sql: str) -> int:
    with inst.connect().cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0])


def assert_nothing_halted_or_locked(zones, meta) -> None:
    for z in ("a", "b", "c"):
        assert _count(zones[z], "SELECT COUNT(*) FROM zonesync.apply_state WHERE status <> 'running'") == 0, (
            f"a partition of {z} halted"
        )
        assert _count(zones[z], "SELECT COUNT(*) FROM zonesync.row_locks") == 0, f"a row of {z} was locked"
    raised, _ = meta.run("SELECT zone, kind FROM alerts")
    halts = [(z, k) for z, k in raised if k in ("partition_halted", "row_locked", "count_mismatch")]
    assert halts == [], f"the cut halted or locked: {list(raised)}"


# -- the workload ----------------------------------------------------------------------------


def write_before(guards) -> None:
    ga, gb, gc = guards
    for g, keys in ((ga, A_BEFORE), (gb, B_BEFORE), (gc, C_BEFORE)):
        with g.transaction() as tx:
            for t in keys:
                tx.insert("tenants", {"tenant_id": t, "name": f"t{t}"})


def refused_elsewhere(gb, gc) -> int:
    """Writes to zone a's tenants through b's and c's guards, each refused: how many."""
    refused = 0
    for g in (gb, gc):
        for write in (
            lambda tx: tx.insert("tenants", {"tenant_id": A_DARK[0], "name": "not here"}),
            lambda tx: tx.insert("tenants", {"tenant_id": 200, "name": "not here"}),
            lambda tx: tx.update("tenants", {"tenant_id": A_BEFORE[0]}, {"name": "not here"}),
            lambda tx: tx.delete("tenants", {"tenant_id": A_BEFORE[-1]}),
            lambda tx: tx.insert("orders", {"order_id": 999_001, "tenant_id": A_DARK[0], "amount": "1.00"}),
        ):
            with pytest.raises(WrongZone) as err:
                with g.transaction() as tx:
                    write(tx)
            assert err.value.owner == "a", err.value
            refused += 1
    return refused


def write_in_the_dark(guards, during) -> Counter:
    """Zone a's clients commit A_DARK (a tenant and its order per transaction, some with an
    update or a delete of an older tenant), b's and c's their own, `during()` checked
    between transactions: the (table, op) of every change zone a committed."""
    ga, gb, gc = guards
    changes: Counter = Counter()
    updated, deleted = iter(A_UPDATED), iter(A_DELETED)
    for i, t in enumerate(A_DARK):
        with ga.transaction() as tx:
            tx.insert("tenants", {"tenant_id": t, "name": f"dark{t}"})
            tx.insert("orders", {"order_id": t * 10, "tenant_id": t, "amount": f"{t}.50"})
            changes.update([("tenants", "insert"), ("orders", "insert")])
            if i % 4 == 1 and (u := next(updated, None)) is not None:
                assert tx.update("tenants", {"tenant_id": u}, {"name": f"dark{u}"}) == 1
                changes["tenants", "update"] += 1
            if i % 4 == 3 and (d := next(deleted, None)) is not None:
                assert tx.delete("tenants", {"tenant_id": d}) == 1
                changes["tenants", "delete"] += 1
        if i % 4 == 0:
            with gb.transaction() as tx:
                tx.insert("tenants", {"tenant_id": B_DARK[i // 4], "name": "b dark"})
            with gc.transaction() as tx:
                tx.insert("tenants", {"tenant_id": C_DARK[i // 4], "name": "c dark"})
        if i % 10 == 0:
            during()
        time.sleep(0.02)
    assert next(updated, None) is None and next(deleted, None) is None
    return changes


def replicator_retries(caplog, since: int) -> int:
    return sum(
        1
        for r in caplog.records[since:]
        if r.name == "zonesync.replicator" and "replicator a:" in r.getMessage() and RETRY_LOG in r.getMessage()
    )


# -- the tests -------------------------------------------------------------------------------


def test_a_dark_zones_commits_stay_its_own_and_are_delivered_when_it_returns(
    zones, meta, broker, test_cfg, guard_env, capsys, caplog
):
    caplog.set_level(logging.WARNING, logger="zonesync.replicator")
    guards = ga, gb, gc = guard_env("a"), guard_env("b"), guard_env("c")
    with dark_zone_a(zones, meta, broker, test_cfg) as (cluster, links):
        replicator = cluster.replicators["a"]
        write_before(guards)
        wait_converged(zones, ("tenants",), timeout=30)
        conn = zones["a"].connect()
        try:
            end = position(conn)
            at = (file_number(end[0]), end[1])
        finally:
            conn.close()
        # the checkpoint reaches past a's last commit (nothing of it left unsaved)
        wait_until(
            lambda: (cp := latest_checkpoint(meta, "a")) and (file_number(cp.log_file), cp.log_pos) >= at,
            15,
            "replicator a's checkpoint covers zone a's commits before the cut",
        )
        before = a_part(zones["a"])
        assert a_part(zones["b"]) == a_part(zones["c"]) == before
        holder = lease_holder(meta, "a")
        assert holder == replicator.lease.holder
        applied_a = {z: {p: v[0] for p, v in positions(zones[z], "a").items()} for z in ("b", "c")}

        links["replicator"].cut()
        cut_at, logged_at = time.monotonic(), len(caplog.records)
        # the replicator notices: its pass ends (a checkpoint being saved as the link went has landed)
        wait_until(lambda: replicator_retries(caplog, logged_at) >= 1, 15, "replicator a sees the link cut")
        cp_at_cut = latest_checkpoint(meta, "a")
        assert (file_number(cp_at_cut.log_file), cp_at_cut.log_pos) >= at
        published_at_cut = replicator.published
        topic_at_cut = topic_events(cluster, "a")
        for p, events in topic_at_cut.items():
            published = events[-1].lsn if events else 0
            assert cp_at_cut.partition_lsns.get(p, 0) <= published, (
                f"partition {p}: checkpoint at LSN {cp_at_cut.partition_lsns.get(p)}, the topic ends at {published}"
            )
        refusals = 0

        def nothing_of_a_elsewhere() -> None:
            nonlocal refusals
            for z in ("b", "c"):
                assert a_part(zones[z]) == before, f"zone a's cut-time changes reached zone {z}"
                assert {p: v[0] for p, v in positions(zones[z], "a").items()} == applied_a[z]
            refusals += refused_elsewhere(gb, gc)
            assert cluster.threads["replicator-a"].is_alive(), "replicator a gave up"
            assert replicator.published == published_at_cut, "replicator a published during the cut"
            cp = latest_checkpoint(meta, "a")
            assert (cp.lsn, cp.log_file, cp.log_pos, cp.partition_lsns, cp.partition_counts) == (
                cp_at_cut.lsn,
                cp_at_cut.log_file,
                cp_at_cut.log_pos,
                cp_at_cut.partition_lsns,
                cp_at_cut.partition_counts,
            ), "replicator a's checkpoint moved during the cut"

        dark = write_in_the_dark(guards, nothing_of_a_elsewhere)
        dark_events = sum(dark.values())
        assert a_part(zones["a"]) != before, "zone a's clients committed during the cut"
        # zones b and c are not dark: their cut-time changes reach each other and zone a
        wait_until(
            lambda: b_part(zones["a"]) == b_part(zones["c"]) == b_part(zones["b"]), 30, "b's changes reach a and c"
        )
        wait_until(
            lambda: c_part(zones["a"]) == c_part(zones["b"]) == c_part(zones["c"]), 30, "c's changes reach a and b"
        )
        while time.monotonic() - cut_at < CUT_SECONDS:
            nothing_of_a_elsewhere()
            time.sleep(0.5)
        nothing_of_a_elsewhere()
        cut_lasted = time.monotonic() - cut_at
        retries = replicator_retries(caplog, logged_at)
        assert retries >= 3, f"replicator a restarted {retries} time(s) in {cut_lasted:.1f} s of cut: it gave up"
        assert topic_events(cluster, "a") == topic_at_cut, "zone a's topic changed during the cut"
        assert lease_holder(meta, "a") == holder, "replicator a lost its lease during the cut"
        assert_nothing_halted_or_locked(zones, meta)

        links["replicator"].restore()
        restored_at = time.monotonic()
        sums = wait_converged(zones, ("tenants", "orders"), timeout=60)
        delivered = time.monotonic() - restored_at
        assert a_part(zones["b"]) == a_part(zones["c"]) == a_part(zones["a"]) != before
        assert len(sums["tenants"]["b"]) == (
            len(A_BEFORE) + len(A_DARK) - len(A_DELETED) + len(B_BEFORE) + len(B_DARK) + len(C_BEFORE) + len(C_DARK)
        )
        assert len(sums["orders"]["b"]) == len(A_DARK)

        # the same replicator resumed from its checkpoint: each partition's new events chain on
        # from the checkpoint's LSN, and they are exactly the changes committed in the dark
        assert cluster.threads["replicator-a"].is_alive() and lease_holder(meta, "a") == holder
        wait_until(lambda: replicator.published - published_at_cut >= dark_events, 15, "a's changes published")
        after = topic_events(cluster, "a")
        new: Counter = Counter()
        for p in range(PARTITIONS):
            assert after[p][: len(topic_at_cut[p])] == topic_at_cut[p]
            chain = after[p][len(topic_at_cut[p]) :]
            prev = cp_at_cut.partition_lsns.get(p, 0)
            for ev in chain:
                assert ev.prev_lsn == prev and ev.lsn > prev and not ev.is_retry, (p, prev, ev)
                prev = ev.lsn
            new.update((ev.table, ev.op) for ev in chain)
        assert new == dark, f"published after the cut: {dict(new)}, committed during it: {dict(dark)}"
        assert replicator.published - published_at_cut == dark_events

        # counts reconciled: every event published is committed once in b and in c
        a_events = len(A_BEFORE) + dark_events
        for target in ("b", "c"):
            rows = settled_reconciliation(meta, zones, target, timeout=20)
            assert rows and all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
            assert sum(r.committed for r in rows if r.source == "a") == a_events
            capsys.readouterr()
            assert cli.main(["reconcile", "--zone", target]) == 0
            out = capsys.readouterr().out
            assert f"zone {target}: {2 * PARTITIONS} partition(s) reconciled, 0 differ" in out, out
        assert_nothing_halted_or_locked(zones, meta)
        requests, _ = meta.run("SELECT source_zone, partition_no FROM resend_requests")
        assert list(requests) == [], f"the cut made appliers ask resends: {requests}"
    with capsys.disabled():
        print(
            f"\nzone a dark {cut_lasted:.1f} s: {dark_events} changes committed there ({dict(dark)}), "
            f"{refusals} writes to a's tenants refused in b and c, replicator a restarted {retries} times; "
            f"b and c converged {delivered:.1f} s after the link was back"
        )


def test_a_zone_dark_both_ways_gets_and_gives_every_change_when_it_returns(
    zones, meta, broker, test_cfg, guard_env, capsys
):
    guards = ga, gb, gc = guard_env("a"), guard_env("b"), guard_env("c")
    with dark_zone_a(zones, meta, broker, test_cfg, applier_too=True) as (cluster, links):
        write_before(guards)
        wait_converged(zones, ("tenants",), timeout=30)
        before = {part: part(zones["a"]) for part in (a_part, b_part, c_part)}
        applied_in_a = {s: {p: v[0] for p, v in positions(zones["a"], s).items()} for s in ("b", "c")}

        for link in links.values():
            link.cut()
        cut_at = time.monotonic()

        def dark_both_ways() -> None:
            for z in ("b", "c"):
                assert a_part(zones[z]) == before[a_part], f"zone a's cut-time changes reached zone {z}"
            assert b_part(zones["a"]) == before[b_part] and c_part(zones["a"]) == before[c_part], (
                "b's or c's cut-time changes reached zone a while its applier was cut off"
            )
            for s in ("b", "c"):
                got = positions(zones["a"], s)
                assert {p: v[0] for p, v in got.items()} == applied_in_a[s]
                assert all(v[3] == "running" for v in got.values()), got
            refused_elsewhere(gb, gc)

        dark = write_in_the_dark(guards, dark_both_ways)
        # b and c, not dark, replicate between themselves
        wait_until(lambda: b_part(zones["c"]) == b_part(zones["b"]) != before[b_part], 30, "b's changes reach c")
        wait_until(lambda: c_part(zones["b"]) == c_part(zones["c"]) != before[c_part], 30, "c's changes reach b")
        while time.monotonic() - cut_at < CUT_SECONDS:
            dark_both_ways()
            time.sleep(0.5)
        dark_both_ways()
        cut_lasted = time.monotonic() - cut_at
        assert cluster.threads["applier-a"].is_alive() and cluster.threads["replicator-a"].is_alive()
        assert_nothing_halted_or_locked(zones, meta)

        for link in links.values():
            link.restore()
        restored_at = time.monotonic()
        wait_converged(zones, ("tenants", "orders"), timeout=60)
        delivered = time.monotonic() - restored_at
        for part in (a_part, b_part, c_part):
            assert part(zones["a"]) == part(zones["b"]) == part(zones["c"]) != before[part]
        for target in ("a", "b", "c"):
            rows = settled_reconciliation(meta, zones, target, timeout=20)
            assert rows and all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
            capsys.readouterr()
            assert cli.main(["reconcile", "--zone", target]) == 0
            out = capsys.readouterr().out
            assert f"zone {target}: {2 * PARTITIONS} partition(s) reconciled, 0 differ" in out, out
        b_events = sum(r.committed for r in settled_reconciliation(meta, zones, "a", ["b"]))
        assert b_events == len(B_BEFORE) + len(B_DARK)
        assert_nothing_halted_or_locked(zones, meta)
        requests, _ = meta.run("SELECT source_zone, partition_no FROM resend_requests")
        assert list(requests) == [], f"the cut made appliers ask resends: {requests}"
    with capsys.disabled():
        print(
            f"\nzone a dark both ways {cut_lasted:.1f} s: {sum(dark.values())} changes committed there; "
            f"every zone converged {delivered:.1f} s after the links were back"
        )
