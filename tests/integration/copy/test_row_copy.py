"""The row copy (spark_jobs/full_copy.py) against real zones, with no stream running:
key-range chunks, the version rule, tombstones, resuming after a stop."""

from __future__ import annotations

import pytest

from spark_jobs import full_copy
from tests.integration.copy.conftest import copy_args
from tests.support.apply_faults import wait_for_waiters
from tests.support.background import wait_until
from tests.support.replication import checksum, reset_state
from zonesync.copy import chunks

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _fill(inst, rows, table: str = "tenants") -> None:
    """rows: (tenant_id, name, origin, version)."""
    conn = inst.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")
        cur.executemany(f"INSERT INTO {table} (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, %s, %s, %s)", rows)
    conn.commit()
    conn.close()


def _rows(inst) -> dict[int, tuple]:
    return {r[0]: (r[1], r[3], r[4]) for r in checksum(inst)}


@pytest.fixture
def empty(zones, meta, clean_copies):
    reset_state(zones, meta)
    yield
    reset_state(zones, meta)


def test_a_copy_into_an_empty_zone_equals_the_source(zones, spark, tmp_path, empty):
    _fill(zones["a"], [(i, f"t{i}", 1, 1000 + i) for i in range(1, 2601)])
    result = full_copy.run(spark, copy_args(zones, tmp_path, "r1", "a", "b"))
    assert result["tenants"]["chunks"] == 6 and result["tenants"]["rows"] == 2600  # 5 full chunks and the tail
    assert checksum(zones["b"]) == checksum(zones["a"])
    done = chunks.read(zones["b"].connect(), "r1", "tenants")
    assert [c["status"] for c in done] == ["done"] * 6 and sum(c["rows_read"] for c in done) == 2600


def test_newer_rows_and_tombstones_in_the_target_win(zones, spark, tmp_path, empty):
    """S000-72..76 from the copy's side: a target row newer than the source's stays, an
    older one is replaced, and a tombstone at or above the source's version keeps the row
    away; a tombstone below it does not."""
    _fill(zones["a"], [(1, "src", 1, 10), (2, "src", 1, 10), (3, "src", 1, 10), (4, "src", 1, 10)])
    _fill(zones["b"], [(1, "newer", 3, 20), (2, "older", 3, 5)])
    conn = zones["b"].connect()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES ('tenants', '[3]', 10)")
        cur.execute("INSERT INTO zonesync.tombstones (table_name, pk, version) VALUES ('tenants', '[4]', 9)")
    conn.commit()
    full_copy.run(spark, copy_args(zones, tmp_path, "r2", "a", "b"))
    assert _rows(zones["b"]) == {1: ("newer", 3, 20), 2: ("src", 1, 10), 4: ("src", 1, 10)}


def test_a_rerun_skips_done_chunks_and_finishes(zones, spark, tmp_path, empty):
    """A copy stopped after some chunks (as a killed job leaves it) and run again merges
    only the chunks that were not done, and ends equal to the source."""
    _fill(zones["a"], [(i, f"t{i}", 1, 1000 + i) for i in range(1, 2001)])
    first = full_copy.run(spark, copy_args(zones, tmp_path, "r3", "a", "b", stop_after=2))
    assert first["tenants"]["rows"] == 1000 and len(checksum(zones["b"])) == 1000
    # chunks (-inf, 500], (500, 1000] are done; (1000, 1500], (1500, 2000] and the empty
    # tail (2000, +inf) are merged by the re-run, and only they
    second = full_copy.run(spark, copy_args(zones, tmp_path, "r3", "a", "b"))
    assert second["tenants"]["rows"] == 1000 and second["tenants"]["done"] == 5
    assert checksum(zones["b"]) == checksum(zones["a"])


def test_chunks_are_key_ranges_that_cover_every_key(zones, empty):
    _fill(zones["a"], [(i * 7, "x", 1, 1) for i in range(1, 101)])
    conn = zones["a"].connect("zonesync_app")
    planned = chunks.plan(conn, "tenants", ["tenant_id"], 30)
    assert planned == [(None, [210]), ([210], [420]), ([420], [630]), ([630], None)]
    assert chunks.predicate(["tenant_id"], [210], [420]) == "`tenant_id` > 210 AND `tenant_id` <= 420"


def test_the_copy_waits_while_another_zone_lags(zones, meta, spark, tmp_path, empty):
    """S000-78: with c lagging past --max-lag-s, no chunk is read; once c is back under
    it the copy goes on. The target's own lag (its appliers replay by design) is ignored."""
    import threading

    from tests.support.rules import meta_url

    _fill(zones["a"], [(i, f"t{i}", 1, 1000 + i) for i in range(1, 1001)])
    meta.run(
        "INSERT INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, behind_seconds) "
        "VALUES ('a', 'c', 0, 1, 500, 30.0), ('a', 'b', 0, 1, 9000, 300.0)"
    )
    said: list[str] = []
    args = copy_args(zones, tmp_path, "throttled", "a", "b", meta=meta_url(meta), max_lag_s=2.0)
    job = threading.Thread(target=lambda: said.append(full_copy.run(spark, args, log=said.append)), daemon=True)
    job.start()
    wait_until(lambda: any("throttled: a -> c lags 30.0 s" in str(s) for s in said), 60, "the copy throttles")
    assert not any(c["status"] == "done" for c in chunks.read(zones["b"].connect(), "throttled", "tenants"))
    meta.run("UPDATE apply_lag SET behind_seconds = 0.5 WHERE target_zone = 'c'")
    job.join(120)
    assert not job.is_alive() and isinstance(said[-1], dict) and said[-1]["tenants"]["rows"] == 1000
    assert checksum(zones["b"]) == checksum(zones["a"])


def test_a_chunk_chosen_as_a_deadlock_victim_is_landed_again(zones, spark, tmp_path, empty):
    """An applier and a chunk deadlock in the target (the applier holds a key of the
    chunk's range and then wants the chunk's row): InnoDB rolls the chunk back, and its
    task lands it again from the rows it holds once the applier commits."""
    import threading

    _fill(zones["a"], [(i, f"t{i}", 1, 100 + i) for i in range(1, 201)])
    other = zones["b"].connect("zonesync_app")
    with other.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS ballast (id INT PRIMARY KEY)")
        cur.execute("TRUNCATE ballast")
        # the other transaction: heavier (InnoDB rolls the lighter one back), holding key 50
        cur.execute("SET SESSION skip_replication = 1")
        other.begin()
        cur.execute("INSERT INTO ballast SELECT seq FROM seq_1_to_5000")
        cur.execute("INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (50, 'other', 2, 1)")
    result: dict = {}

    def copy() -> None:
        try:
            result.update(
                full_copy.run(spark, copy_args(zones, tmp_path, "r-dl", "a", "b", chunk_rows=100, parallel=1))
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
            result["error"] = exc

    job = threading.Thread(target=copy)
    job.start()
    watcher = zones["b"].connect()
    try:
        wait_for_waiters(watcher, other.thread_id(), 60, "chunk 0 waits for key 50")
        with other.cursor() as cur:  # closes the cycle: chunk 0's row, which its task holds
            cur.execute("SELECT status FROM zonesync.copy_chunks WHERE run_id = 'r-dl' AND chunk_no = 0 FOR UPDATE")
            assert cur.fetchone()[0] == "pending"  # granted: the chunk was the victim, and rolled back
        other.commit()
    finally:
        job.join(120)
        with other.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS ballast")
        other.close()
        watcher.close()
    assert result["tenants"]["done"] == result["tenants"]["chunks"] == 3  # (-inf, 100], (100, 200], (200, +inf)
    assert checksum(zones["b"]) == checksum(zones["a"])  # key 50 is the source's newer row


def test_orphans_are_the_target_keys_the_source_lacks(spark):
    """The prune step's candidates (full_copy.find_orphans, a pure transform): composite
    keys compared whole."""
    from pyspark.testing import assertDataFrameEqual

    target = spark.createDataFrame([(1, 1), (1, 2), (2, 1), (3, 3)], ["a", "b"])
    source = spark.createDataFrame([(1, 1), (2, 1), (2, 2), (3, 4)], ["a", "b"])
    expected = spark.createDataFrame([(1, 2), (3, 3)], ["a", "b"])
    assertDataFrameEqual(full_copy.find_orphans(target, source, ["a", "b"]), expected)
    assertDataFrameEqual(
        full_copy.find_orphans(source, source, ["a", "b"]), spark.createDataFrame([], "a long, b long")
    )


def test_a_plan_cut_short_goes_on_from_its_last_chunk(zones, spark, tmp_path, empty):
    """The planner writes each chunk as it finds it: killed after two, the next attempt
    reads them back, plans on from the second's upper bound, and copies everything."""
    _fill(zones["a"], [(i, f"t{i}", 1, 1000 + i) for i in range(1, 1201)])
    dst, src = zones["b"].connect(), zones["a"].connect("zonesync_app")
    src.autocommit(False)
    dst.autocommit(False)

    def killed(chunk):
        if chunk["chunk"] == 1:
            raise KeyboardInterrupt("the planner is killed")

    with pytest.raises(KeyboardInterrupt):
        chunks.extend_plan(dst, src, "r-plan", "tenants", ["tenant_id"], 300, [], found=killed)
    stored = chunks.read(dst, "r-plan", "tenants")
    assert [(c["lo"], c["hi"]) for c in stored] == [(None, [300]), ([300], [600])] and not chunks.complete(stored)
    result = full_copy.run(spark, copy_args(zones, tmp_path, "r-plan", "a", "b", chunk_rows=300))
    plan = chunks.read(dst, "r-plan", "tenants")
    assert [(c["lo"], c["hi"]) for c in plan] == [(None, [300]), ([300], [600]), ([600], [900]), ([900], [1200]),
                                                  ([1200], None)]  # fmt: skip
    assert result["tenants"]["done"] == 5 and result["tenants"]["rows"] == 1200
    assert checksum(zones["b"]) == checksum(zones["a"])
    dst.close()
    src.close()


def test_two_planners_of_one_run_agree_on_the_stored_chunks(zones, empty):
    """A task killed while its Spark job lives on, and the retry's job: both plan the same
    run. The second, which read the plan while it was empty, finds chunks 0 and 1 written
    by the first (with other bounds), adopts them and plans on from there: one plan, no
    gap, no overlap, and it hands its copier the stored bounds."""
    _fill(zones["a"], [(i, f"t{i}", 1, 1000 + i) for i in range(1, 1201)])
    dst, src = zones["b"].connect(), zones["a"].connect("zonesync_app")
    src.autocommit(False)
    dst.autocommit(False)

    def first_stops(chunk):
        if chunk["chunk"] == 1:
            raise KeyboardInterrupt("the first planner is stopped after two chunks")

    with pytest.raises(KeyboardInterrupt):
        chunks.extend_plan(dst, src, "r-race", "tenants", ["tenant_id"], 500, [], found=first_stops)
    handed = []
    chunks.extend_plan(dst, src, "r-race", "tenants", ["tenant_id"], 300, [], found=handed.append)
    plan = [(c["lo"], c["hi"]) for c in chunks.read(dst, "r-race", "tenants")]
    assert plan == [(None, [500]), ([500], [1000]), ([1000], None)]
    assert [(c["lo"], c["hi"]) for c in handed] == plan
    dst.close()
    src.close()
