"""The tag backfill (spark_jobs/tag_backfill.py): rows that existed before their table's
tag rule are tagged by a Spark job, chunk by chunk, resumably, while live writes go on
and the tagger tags them: at the end the tag store says exactly what the zone holds."""

from __future__ import annotations

import random
import threading

import pytest

from spark_jobs import tag_backfill
from tests.support.background import wait_until
from tests.support.replication import wait_converged
from tests.support.taggers import Taggers, clear_orders, live_tags, older_orders
from zonesync.meta.store import MetaStore
from zonesync.tagging.backfill_runs import BackfillRuns
from zonesync.tagging.rules import parse
from zonesync.tagging.tag_store import TagStore

pytestmark = pytest.mark.integration

TENANTS = {"mysql": [{"repo": "zonesync_app", "table": "tenants", "index_keys": ["tenant_id"],
                      "entity": {"type": "tenant", "field": "tenant_id"}}]}  # fmt: skip
ORDERS = {"repo": "zonesync_app", "table": "orders", "index_keys": ["order_id"],
          "entity": {"type": "tenant", "field": "tenant_id"}}  # fmt: skip
OLD_ORDERS = 600  # order_id = 20 * i: 12k keys, 12 chunks of 1000 (more once new orders come)


def test_transform_makes_one_segment_per_chunk_and_entity(spark):
    from pyspark.testing import assertDataFrameEqual

    rows = spark.createDataFrame(
        [(0, 5, 7, 11), (0, 6, 7, 12), (0, 8, None, 13), (1, 1005, 7, 14), (1, 1006, 9, 15)],
        "chunk_no int, k0 bigint, entity bigint, version bigint",
    )
    expected = spark.createDataFrame(
        [(0, "tenant", "7", "orders", "[5]\t11\t0\n[6]\t12\t0", 2),
         (1, "tenant", "7", "orders", "[1005]\t14\t0", 1),
         (1, "tenant", "9", "orders", "[1006]\t15\t0", 1)],
        "chunk_no int, entity_type string, entity_id string, table_name string, entries string, rows_tagged bigint",
    )  # fmt: skip
    assertDataFrameEqual(tag_backfill.transform(rows, "tenant", "orders"), expected)


def _args(zones, tmp_path, run_id: str, *extra: str):
    return tag_backfill.parse_args([
        "--run-id", run_id, "--zone", f"b=jdbc:mysql://127.0.0.1:{zones['b'].port}/zonesync_app",
        "--zone-user", "b=root", "--output", str(tmp_path / f"{run_id}.json"), "--chunk-rows", "1000",
        "--wait-tagger-s", "60", *extra,
    ])  # fmt: skip


def _rows(inst) -> dict[str, str]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT order_id, tenant_id FROM orders")
        return {f"[{o}]": str(t) for o, t in cur.fetchall()}


def test_a_backfill_racing_live_writes_resumes_and_ends_with_exactly_the_zones_rows(
    cluster, zones, meta, guard_env, spark, tmp_path
):  # fmt: skip
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant'")
    meta.run("DELETE FROM backfills WHERE run_id = 'race'")
    b = zones["b"]
    with b.connect().cursor() as cur:
        cur.execute("DELETE FROM zonesync.tag_segments")
        cur.execute("DELETE FROM zonesync.tag_state")
        cur.execute("DELETE FROM zonesync.tag_backfill")
    store = TagStore(lambda: b.connect("zonesync_app"), "zonesync_app")
    MetaStore(meta).publish_tags(parse(TENANTS), "test: tenants only")
    guard, rng = guard_env("a"), random.Random(21)
    for lo in range(0, OLD_ORDERS, 50):  # orders written before their rule exists
        with guard.transaction() as tx:
            for i in range(lo, lo + 50):
                tx.insert("orders", {"order_id": 20 * i, "tenant_id": rng.randrange(400), "amount": 1})
    taggers = Taggers(cluster, b, meta)
    taggers.start()
    try:
        wait_converged(zones, ("orders",), timeout=60)
        wait_until(lambda: taggers.caught_up(store), 60, "the tagger caught up")
        assert live_tags(store, "orders") == {}  # no rule for orders yet: none tagged

        MetaStore(meta).publish_tags(parse({"mysql": TENANTS["mysql"] + [ORDERS]}), "test: orders too")
        stop, moved = threading.Event(), {"n": 0}

        def load():  # moves and deletes old orders and writes new ones, all through the guard
            next_id, old = 20 * OLD_ORDERS + 1, [20 * i for i in range(OLD_ORDERS)]
            while not stop.is_set():
                with guard.transaction() as tx:
                    tx.update("orders", {"order_id": rng.choice(old)}, {"tenant_id": rng.randrange(400)})
                    tx.insert("orders", {"order_id": next_id, "tenant_id": rng.randrange(400), "amount": 2})
                    next_id += 1
                if rng.random() < 0.2 and len(old) > OLD_ORDERS // 2:
                    with guard.transaction() as tx:
                        tx.delete("orders", {"order_id": old.pop(rng.randrange(len(old)))})
                moved["n"] += 1

        writer = threading.Thread(target=load, daemon=True)
        writer.start()
        try:
            first = tag_backfill.run(spark, _args(zones, tmp_path, "race", "--stop-after", "5"))
            assert first["tables"]["orders"]["chunks"] >= 12 and first["tables"]["tenants"]["chunks"] >= 1
            assert len(tag_backfill.done_chunks(b.connect(), "race", "zonesync_app", "orders")) == 5
            # the run in meta, as the console shows it: cut short, it is still running
            runs = BackfillRuns(meta)
            got = runs.get("race")
            planned = first["tables"]["orders"]["chunks"] + first["tables"]["tenants"]["chunks"]
            assert (got["status"], got["done"], got["total"]) == ("running", 5, planned), got
            second = tag_backfill.run(spark, _args(zones, tmp_path, "race"))
            chunks = second["tables"]["orders"]["chunks"]  # more than at first: new orders' keys come after
            assert second["tables"]["orders"]["resumed_after"] == 5 and chunks >= first["tables"]["orders"]["chunks"]
            assert len(tag_backfill.done_chunks(b.connect(), "race", "zonesync_app", "orders")) == chunks
            got = runs.get("race")
            total = chunks + second["tables"]["tenants"]["chunks"]
            assert (got["status"], got["done"], got["total"], got["attempt_chunks"]) == ("succeeded", total, total, 5)
            tagged = sum(t["rows_tagged"] for t in (*first["tables"].values(), *second["tables"].values()))
            assert got["rows"] == tagged, got
        finally:
            stop.set()
            writer.join(30)
        assert moved["n"] > 10
        wait_converged(zones, ("orders",), timeout=60)
        wait_until(lambda: taggers.caught_up(store), 60, "the tagger caught up")
        assert live_tags(store, "orders") == _rows(b)
        assert len(_rows(b)) > OLD_ORDERS
    finally:
        taggers.stop()
        with b.connect().cursor() as cur:
            cur.execute("DELETE FROM zonesync.tag_segments")
            cur.execute("DELETE FROM zonesync.tag_state")


def test_bad_arguments_are_refused_in_one_line(zones, tmp_path, capsys):
    with pytest.raises(SystemExit):
        tag_backfill.parse_args(["--run-id", "x", "--output", "o", "--zone", "b=jdbc:mysql://h/d", "--table", "a;b"])
    assert "--table 'a;b' is not a plain SQL identifier" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tag_backfill.parse_args(["--run-id", "x", "--output", "o", "--zone", "b=jdbc:mysql://h/d", "--zone",
                                 "c=jdbc:mysql://h/d"])  # fmt: skip
    assert "--zone: exactly one" in capsys.readouterr().err


KILL_ROWS = 30_000


@pytest.fixture
def older_rows(zones, meta):
    """Zone c: 30k orders older than their rule, its tagger (not run here) on the rules."""
    older_orders(zones["c"], meta, {"mysql": [ORDERS]}, KILL_ROWS, 50, "test: the backfill killed")
    yield zones["c"]
    clear_orders(zones["c"])


@pytest.mark.slow
def test_a_backfill_killed_mid_way_on_a_standalone_cluster_resumes_and_tags_each_row_once(
    older_rows, meta, standalone, tmp_path
):  # fmt: skip
    """spark-submit to a standalone master and worker, SIGKILL to the driver's process
    group once a few chunks are marked, the same run submitted again: it skips the marked
    chunks, every chunk is written once, and the store holds exactly the zone's rows."""
    import os
    import signal
    from pathlib import Path

    from tests.support.rules import meta_url
    from tests.support.spark_cluster import submit

    job = Path(tag_backfill.__file__)
    args = ["--run-id", "killed", "--zone", f"c=jdbc:mysql://127.0.0.1:{older_rows.port}/zonesync_app",
            "--zone-user", "c=root", "--chunk-rows", "1000", "--meta", meta_url(meta),
            "--output", str(tmp_path / "out.json")]  # fmt: skip

    def marked() -> int:
        return len(tag_backfill.done_chunks(older_rows.connect(), "killed", "zonesync_app", "orders"))

    first = submit(job, args, standalone.url, tmp_path / "first.log")
    try:
        wait_until(lambda: marked() >= 4 or first.poll() is not None, 180, "4 chunks marked")
        assert first.poll() is None, (
            f"the job ended before it was killed: {(tmp_path / 'first.log').read_text()[-2000:]}"
        )
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(30)
    before = marked()
    assert 4 <= before < 30, f"{before} of 30 chunks marked when killed: kill it earlier"
    second = submit(job, args, standalone.url, tmp_path / "second.log")
    assert second.wait(300) == 0, (tmp_path / "second.log").read_text()[-3000:]
    with older_rows.connect().cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(rows_tagged) FROM zonesync.tag_backfill WHERE run_id = 'killed'")
        chunks, tagged = cur.fetchone()
    assert (chunks, int(tagged)) == (30, KILL_ROWS)  # each chunk written once
    store = TagStore(lambda: older_rows.connect("zonesync_app"), "zonesync_app")
    assert live_tags(store, "orders") == {f"[{i}]": str(i % 50) for i in range(1, KILL_ROWS + 1)}
    import json

    # (the executors outlive the driver's process group: a chunk or two may commit after the kill)
    assert json.loads((tmp_path / "out.json").read_text())["tables"]["orders"]["resumed_after"] >= before
