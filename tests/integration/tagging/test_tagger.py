"""The tagger (tagging/tagger.py; seed 004 S004-04, S004-05, S004-10): every zone's
changes into one zone's tag store, under replication and guarded writes in every zone.

Zone b's tagger follows a, b and c. Each registered row is tagged with its entity; an
update that moves a row to another entity moves its tag (a deleted entry in the old
entity); a delete leaves a deleted entry; a tagger stopped and started again, or one that
lost its state and reads every topic again from the start, ends with exactly the same
tags. (Rows sharing unique-key values, S004-10, and shuffled topics: tests/unit/
test_tag_extract.py.)"""

from __future__ import annotations

import pytest

from tests.support.background import wait_until
from tests.support.taggers import Taggers, live_tags
from zonesync.meta.store import MetaStore
from zonesync.tagging.rules import parse
from zonesync.tagging.tag_store import TagStore, load_connection

pytestmark = pytest.mark.integration

RULES = {"mysql": [
    {"repo": "zonesync_app", "table": "tenants", "index_keys": ["tenant_id"],
     "entity": {"type": "tenant", "field": "tenant_id"}},
    {"repo": "zonesync_app", "table": "orders", "index_keys": ["order_id"],
     "entity": {"type": "tenant", "field": "tenant_id"}},
]}  # fmt: skip
# tenants each zone owns (ZSID = tenant_id mod 1024: a 0-399, b 400-799, c 800-1023)
OWN = {"a": 7, "b": 407, "c": 807}


def _tags(inst) -> list[tuple]:
    """(table, idx, entity type, entity id, version, deleted) of every entity's folded tags."""
    return TagStore(lambda: inst.connect("zonesync_app"), "zonesync_app").dump()


def _reset(inst) -> None:
    with inst.connect().cursor() as cur:
        cur.execute("DELETE FROM zonesync.tag_segments")
        cur.execute("DELETE FROM zonesync.tag_state")


@pytest.fixture
def taggers(cluster, zones, meta):
    # tenants placed in other zones by earlier tests (the guard tests move tenant 7 to b)
    # would make these tests' guarded writes WrongZone: the ZSID rules alone decide here
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")
    MetaStore(meta).publish_tags(parse(RULES), "test: tenants and orders")
    _reset(zones["b"])
    t = Taggers(cluster, zones["b"], meta)
    yield t
    t.stop()
    _reset(zones["b"])


def _write(guard_env) -> None:
    for zone, tenant in OWN.items():
        guard = guard_env(zone)
        with guard.transaction() as tx:
            tx.insert("tenants", {"tenant_id": tenant, "name": f"t{tenant}"})
            for n in range(3):
                tx.insert("orders", {"order_id": tenant * 10 + n, "tenant_id": tenant, "amount": 1})


def test_every_zones_rows_are_tagged_moved_and_deleted_and_a_restart_changes_nothing(taggers, guard_env, zones):
    tagger = taggers.start()
    _write(guard_env)
    store = TagStore(lambda: zones["b"].connect("zonesync_app"), "zonesync_app")
    wait_until(lambda: sum(len(v) for v in store.rows_of("tenant", "807").values()) == 4, 30, "c's rows tagged in b")
    # a's stream is another topic: c's rows tagged says nothing about a's (await them too)
    wait_until(lambda: sum(len(v) for v in store.rows_of("tenant", "7").values()) == 4, 30, "a's rows tagged in b")
    assert store.rows_of("tenant", "7") == {"orders": ["[70]", "[71]", "[72]"], "tenants": ["[7]"]}
    assert {len(store.rows_of("tenant", str(t)).get("orders", [])) for t in OWN.values()} == {3}

    a = guard_env("a")
    with a.transaction() as tx:
        tx.update("orders", {"order_id": 71}, {"tenant_id": 8})  # moves to tenant 8 (still a's ZSID)
        tx.delete("orders", {"order_id": 72})
    wait_until(lambda: store.rows_of("tenant", "7").get("orders") == ["[70]"], 30, "the move and the delete tagged")
    assert store.rows_of("tenant", "8") == {"orders": ["[71]"]}
    tags = {(r[1], r[3]): r[5] for r in _tags(zones["b"]) if r[0] == "orders"}
    assert tags[("[72]", "7")] == 1 and tags[("[71]", "7")] == 1 and tags[("[71]", "8")] == 0  # marked, not gone
    assert tagger.untaggable == 0

    # stopped and started again: it goes on from tag_state
    wait_until(lambda: taggers.caught_up(store), 30, "tagged up to the topics' ends")
    before = _tags(zones["b"])
    taggers.stop()
    taggers.start()
    with a.transaction() as tx:
        tx.insert("orders", {"order_id": 99, "tenant_id": 7, "amount": 2})
    wait_until(lambda: "[99]" in store.rows_of("tenant", "7").get("orders", []), 30, "the restarted tagger tags")
    assert [r for r in _tags(zones["b"]) if r[1] != "[99]"] == before
    wait_until(lambda: taggers.caught_up(store), 30, "tagged up to the topics' ends")
    expected = _tags(zones["b"])

    # its positions lost: every event read a second time leaves the very same tags
    taggers.stop()
    with zones["b"].connect().cursor() as cur:
        cur.execute("DELETE FROM zonesync.tag_state")
    taggers.start()
    wait_until(lambda: taggers.caught_up(store), 30, "every topic read again")
    assert _tags(zones["b"]) == expected
    # and the whole store lost: the same again from the topics alone
    taggers.stop()
    _reset(zones["b"])
    taggers.start()
    wait_until(lambda: taggers.caught_up(store), 30, "every topic read again")
    assert _tags(zones["b"]) == expected


def _rows(inst) -> dict[str, str]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT order_id, tenant_id FROM orders")
        return {f"[{o}]": str(t) for o, t in cur.fetchall()}


def test_a_tagger_killed_mid_load_converges_with_no_lost_or_extra_tag(taggers, guard_env, zones, cluster, tmp_path):
    """kill -9 of b's tagger (its own process) three times while zone a inserts, moves and
    deletes orders through its guard: once it catches up, b's live tags are exactly b's
    rows (each order tagged with its tenant), none lost, none extra."""
    import os
    import random
    import signal
    import threading
    import time

    from tests.support import tagger_process
    from tests.support.replication import wait_converged

    guard, rng, stop = guard_env("a"), random.Random(4), threading.Event()
    done = {"writes": 0}

    def load():
        next_id, live = 1000, []
        while not stop.is_set():
            with guard.transaction() as tx:
                for _ in range(5):
                    tx.insert("orders", {"order_id": next_id, "tenant_id": rng.randrange(400), "amount": 1})
                    live.append(next_id)
                    next_id += 1
                if len(live) > 100:
                    tx.update("orders", {"order_id": rng.choice(live[:-50])}, {"tenant_id": rng.randrange(400)})
                    tx.delete("orders", {"order_id": live.pop(rng.randrange(len(live) - 50))})
            done["writes"] += 1

    log = tmp_path / "tagger.log"
    child = tagger_process.spawn(cluster, "b", log)
    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    try:
        for _ in range(3):
            time.sleep(rng.uniform(1.0, 2.5))
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
            child = tagger_process.spawn(cluster, "b", log)
        time.sleep(1)
    finally:
        stop.set()
        writer.join(30)
    store = TagStore(lambda: zones["b"].connect("zonesync_app"), "zonesync_app")
    try:
        wait_converged(zones, ("orders",), timeout=60)
        wait_until(lambda: taggers.caught_up(store), 60, "the last tagger caught up")
        assert done["writes"] > 50
        rows = _rows(zones["b"])
        assert live_tags(TagStore(lambda: zones["b"].connect("zonesync_app"), "zonesync_app"), "orders") == rows, (
            log.read_text()[-3000:]
        )
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(20)


def test_a_large_batch_is_one_load_and_odd_values_read_back_as_written(zones):
    """One batch of 30k entries over 7 tenants through one LOAD DATA; values with tabs,
    newlines and backslashes read back as written; the same batch written a second time
    (a replay) leaves the same tags; compaction folds each entity to one segment and
    changes no tag; a batch numbered out of turn (a second writer) writes nothing."""
    from zonesync.tagging.extract import idx_text

    b = zones["b"]
    _reset(b)
    store = TagStore(lambda: b.connect("zonesync_app"), "zonesync_app")
    odd = idx_text(["a\tb\\c\nd"])
    groups: dict = {}
    for i in range(30_000):
        groups.setdefault(("tenant", str(i % 7), "big"), {})[f"[{i}]"] = (10 + i) << 1
    groups[("tenant", "x\ty\nz\\w", "big")] = {odd: 5 << 1}  # a real tab, newline, backslash
    groups = list(groups.items())
    conn = load_connection("127.0.0.1", b.port, "root", "", "zonesync_app")
    try:
        last = store.last_batch()
        store.write(conn, groups, {("a", 0): (1, 1)}, last + 1)
        first = _tags(b)
        assert len(first) == 30_001 and ("big", odd, "tenant", "x\ty\nz\\w", 5, 0) in first
        assert store.rows_of("tenant", "x\ty\nz\\w") == {"big": [odd]}
        store.write(conn, groups, {("a", 0): (1, 1)}, last + 2)
        assert _tags(b) == first and store.segment_count() == 16
        assert store.compact_all(conn) == 8
        assert _tags(b) == first and store.segment_count() == 8
        # size-tiered: ten small segments of tenant 0 after its big one are folded together,
        # the big one left as it is
        for n in range(10):
            store.write(conn, [(("tenant", "0", "big"), {f"[{100_000 + n}]": 10 << 1})], {}, store.last_batch() + 1)
        store.write(conn, [], {}, store.last_batch() + 1, [("tenant", "0", "big")])
        assert store.segment_count() == 9 and len(store.rows_of("tenant", "0")["big"]) == 4286 + 10
        with pytest.raises(RuntimeError, match="another tagger"):
            store.write(conn, groups, {("a", 0): (9, 9)}, last + 2)
        assert store.segment_count() == 9 and store.positions()[("a", 0)] == (1, 1)
    finally:
        conn.close()
        _reset(b)


def test_a_segment_committed_after_the_batch_took_its_snapshot_is_folded_not_lost(zones):
    """A backfill chunk's segment committed while a tagger batch is open (its transaction
    took its read view already, e.g. compacting an earlier entity) is folded by the
    batch's compaction of that entity, not deleted unread: compaction reads what it locks."""
    b = zones["b"]
    _reset(b)
    store = TagStore(lambda: b.connect("zonesync_app"), "zonesync_app")
    key = ("tenant", "5", "orders")
    conn = load_connection("127.0.0.1", b.port, "root", "", "zonesync_app")
    try:
        for n in range(3):
            store.write(conn, [(key, {f"[{n}]": 10 << 1})], {}, store.last_batch() + 1)
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")  # the batch's read view, taken early
        other = b.connect("zonesync_app")
        with other.cursor() as cur:  # a backfill chunk's segment, committed now (tag_backfill.py)
            cur.execute("INSERT INTO zonesync.tag_segments (entity_type, entity_id, repo, table_name, batch_no, "
                        "entries) VALUES ('tenant', '5', 'zonesync_app', 'orders', -7, '[99]\t9\t0')")  # fmt: skip
        other.commit()
        other.close()
        store.write(conn, [], {}, store.last_batch() + 1, [key])
        assert store.segment_count() == 1
        assert store.rows_of(*key[:2]) == {"orders": ["[0]", "[1]", "[2]", "[99]"]}
    finally:
        conn.close()
        _reset(b)


def test_once_tagged_up_to_every_zones_binlog_a_row_written_just_before_is_tagged(taggers, guard_env, zones, meta,
                                                                                   capsys):  # fmt: skip
    """S004-06 (the tagger's side): a row inserted just before the call is tagged as soon as
    the wait says the store is tagged up to every zone's binlog position of that moment
    (read again at once, no waiting); with the tagger stopped the wait never says so."""
    from zonesync import cli
    from zonesync.capture.binlog import binlog_end
    from zonesync.tagging.freshness import wait_tagged

    def now() -> dict:
        out = {}
        for z, inst in zones.items():
            if z in OWN:
                conn = inst.connect()
                out[z] = binlog_end(conn)
                conn.close()
        return out

    taggers.start()
    store = TagStore(lambda: zones["b"].connect("zonesync_app"), "zonesync_app")
    a = guard_env("a")
    for n in range(5):
        with a.transaction() as tx:
            tx.insert("orders", {"order_id": 500 + n, "tenant_id": 7, "amount": 1})
        assert wait_tagged(meta, store, now(), 30) == []
        assert f"[{500 + n}]" in store.rows_of("tenant", "7")["orders"]
    with a.transaction() as tx:
        tx.insert("orders", {"order_id": 600, "tenant_id": 7, "amount": 1})
    assert cli.main(["tags", "wait", "--zone", "b", "--timeout", "30"]) == 0
    assert "zone b: tagged up to every zone's binlog as of the call (a " in capsys.readouterr().out
    assert "[600]" in store.rows_of("tenant", "7")["orders"]
    taggers.stop()
    with a.transaction() as tx:
        tx.insert("orders", {"order_id": 601, "tenant_id": 7, "amount": 1})
    assert "a" in wait_tagged(meta, store, now(), 1.0)
    assert "[601]" not in store.rows_of("tenant", "7")["orders"]
    assert cli.main(["tags", "wait", "--zone", "b", "--timeout", "1"]) == 1
    assert "zone b: not tagged up to a" in capsys.readouterr().err
    assert cli.main(["tags", "wait", "--zone", "b", "--timeout", "0"]) == 2
    assert "--timeout 0: give 0 < seconds <= 86400" in capsys.readouterr().err
