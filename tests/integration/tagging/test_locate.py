"""Every row of an entity in a zone (tagging/locate.py; S004-09): tagged rows from the tag
store, and the rows of forward-rule tables fetched from their parents' keys, down a chain
of forward rules: a tenant whose rows span four tables, all found, no other tenant's."""

from __future__ import annotations

import pytest

from zonesync import cli
from zonesync.meta.store import MetaStore
from zonesync.tagging.locate import forward_order, locate
from zonesync.tagging.rules import parse
from zonesync.tagging.tag_store import TagStore, load_connection

pytestmark = pytest.mark.integration

RULES = {"mysql": [
    {"repo": "zonesync_app", "table": "tenants", "index_keys": ["tenant_id"],
     "entity": {"type": "tenant", "field": "tenant_id"}},
    {"repo": "zonesync_app", "table": "orders", "index_keys": ["order_id"],
     "entity": {"type": "tenant", "field": "tenant_id"}},
    # replies follow notes, which follow orders (listed before their parent: the order is resolved)
    {"repo": "zonesync_app", "table": "loc_replies", "index_keys": ["reply_id"],
     "forward": {"table": "loc_notes", "columns": {"note_ref": "note_id"}}},
    {"repo": "zonesync_app", "table": "loc_notes", "index_keys": ["note_id"],
     "forward": {"table": "orders", "columns": {"order_ref": "order_id"}}},
]}  # fmt: skip
DDL = (
    "CREATE TABLE IF NOT EXISTS zonesync_app.loc_notes (note_id BIGINT PRIMARY KEY, order_ref BIGINT NULL, "
    "body VARCHAR(32), KEY (order_ref))",
    "CREATE TABLE IF NOT EXISTS zonesync_app.loc_replies (reply_id VARCHAR(16) PRIMARY KEY, note_ref BIGINT NOT NULL, "
    "KEY (note_ref))",
)


@pytest.fixture
def zone_b(zones, meta):
    b = zones["b"]
    rules = parse(RULES)
    MetaStore(meta).publish_tags(rules, "test: forward rules")
    conn = b.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for ddl in DDL:
            cur.execute(ddl)
        for t in ("loc_replies", "loc_notes", "orders", "tenants"):
            cur.execute(f"DELETE FROM {t}")
        cur.execute("DELETE FROM zonesync.tag_segments")
        cur.executemany("INSERT INTO tenants (tenant_id, name) VALUES (%s, %s)", [(7, "t7"), (8, "t8")])
        cur.executemany("INSERT INTO orders (order_id, tenant_id, amount) VALUES (%s, %s, 1)",
                        [(70, 7), (71, 7), (80, 8)])  # fmt: skip
        cur.executemany("INSERT INTO loc_notes (note_id, order_ref, body) VALUES (%s, %s, 'n')",
                        [(700, 70), (701, 70), (710, 71), (800, 80), (900, None)])  # fmt: skip
        cur.executemany("INSERT INTO loc_replies (reply_id, note_ref) VALUES (%s, %s)",
                        [("r1", 700), ("r2", 700), ("r3", 710), ("r8", 800)])  # fmt: skip
    # the tagger's view of the tagged tables (its own tests: test_tagger.py)
    store = TagStore(lambda: b.connect("zonesync_app"), "zonesync_app")
    load = load_connection("127.0.0.1", b.port, "root", "", "zonesync_app")
    segments = [
        (("tenant", "7", "tenants"), {7: 5 << 1}),
        (("tenant", "8", "tenants"), {8: 5 << 1}),
        (("tenant", "7", "orders"), {70: 6 << 1, 71: 6 << 1}),
        (("tenant", "8", "orders"), {80: 6 << 1}),
    ]
    store.write(load, segments, {}, store.last_batch() + 1)
    load.close()
    yield b, rules, store
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for t in ("loc_replies", "loc_notes", "orders", "tenants"):
            cur.execute(f"DELETE FROM {t}")
        cur.execute("DELETE FROM zonesync.tag_segments")
    conn.close()


def _take_out_order_71(b, store) -> None:
    """Order 71 leaves tenant 7 (a deleted entry in a later segment)."""
    load = load_connection("127.0.0.1", b.port, "root", "", "zonesync_app")
    store.write(load, [(("tenant", "7", "orders"), {71: 7 << 1 | 1})], {}, store.last_batch() + 1)
    load.close()


def test_an_entity_spanning_four_tables_through_forward_rules_is_found_whole(zone_b, capsys):
    b, rules, store = zone_b
    assert [r.table for r in forward_order(rules, "zonesync_app")] == ["loc_notes", "loc_replies"]
    conn = b.connect("zonesync_app")
    try:
        assert locate(conn, store, rules, "tenant", "7") == {
            "loc_notes": ["[700]", "[701]", "[710]"],
            "loc_replies": ['["r1"]', '["r2"]', '["r3"]'],
            "orders": ["[70]", "[71]"],
            "tenants": ["[7]"],
        }
        assert locate(conn, store, rules, "tenant", "8") == {
            "loc_notes": ["[800]"], "loc_replies": ['["r8"]'], "orders": ["[80]"], "tenants": ["[8]"]}  # fmt: skip
        assert locate(conn, store, rules, "tenant", "9") == {}
    finally:
        conn.close()
    assert cli.main(["entity", "rows", "tenant", "7", "--zone", "b", "--keys"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tenant 7 in zone b: 9 row(s) (loc_notes 3 by forward rule, loc_replies 3 by forward rule, "
                          "orders 2, tenants 1)")  # fmt: skip
    assert '  loc_replies ["r3"]' in out and "  orders [71]" in out


def test_a_later_segment_takes_a_row_out_and_compaction_changes_no_answer(zone_b, capsys):
    """Order 71 moves out of tenant 7 (a deleted entry in a later segment): it and its notes
    and replies leave the tenant's rows; `zonesync tags compact` folds the segments and
    every answer stays the same."""
    b, rules, store = zone_b
    _take_out_order_71(b, store)
    conn = b.connect("zonesync_app")
    try:
        before = locate(conn, store, rules, "tenant", "7")
        assert before["orders"] == ["[70]"] and before["loc_notes"] == ["[700]", "[701]"]
        assert before["loc_replies"] == ['["r1"]', '["r2"]']
        segments = store.segment_count()
        assert cli.main(["tags", "compact", "--zone", "b"]) == 0
        assert (
            f"zone b: 1 entity table(s) compacted, {segments} -> {segments - 1} segment(s)" in capsys.readouterr().out
        )
        assert locate(conn, store, rules, "tenant", "7") == before
    finally:
        conn.close()


def test_the_spark_job_finds_the_same_rows(zone_b, spark, meta, tmp_path):
    """spark_jobs/entity_rows.py (for entities too large for one process): the same rows
    as locate, counted per table, every key written out; a deleted entry folds as the
    store folds it."""
    import json

    from spark_jobs import entity_rows
    from tests.support.rules import meta_url

    b, rules, store = zone_b
    _take_out_order_71(b, store)
    conn = b.connect("zonesync_app")
    try:
        expected = locate(conn, store, rules, "tenant", "7")
    finally:
        conn.close()
    args = entity_rows.parse_args(["--entity", "tenant:7", "--zone", f"b=jdbc:mysql://127.0.0.1:{b.port}/zonesync_app",
                                   "--zone-user", "b=root", "--meta", meta_url(meta), "--output",
                                   str(tmp_path / "rows.json"), "--keys", str(tmp_path / "keys")])  # fmt: skip
    out = entity_rows.run(spark, args)
    assert out["tables"] == {t: len(v) for t, v in expected.items()} and out["rows"] == 6 and out["kv_keys"] == {}
    written = [
        json.loads(line) for f in sorted((tmp_path / "keys").glob("part-*.json")) for line in f.read_text().splitlines()
    ]
    found: dict[str, list[str]] = {}
    for row in written:
        found.setdefault(row["table_name"], []).append(row["idx"])
    assert {t: sorted(v) for t, v in found.items()} == expected


def test_the_spark_job_runs_on_a_standalone_cluster(zone_b, meta, standalone, tmp_path):
    """The same job spark-submitted to a standalone master and worker: the same counts as
    locate, and every key written out by the executors."""
    import json
    from pathlib import Path

    from spark_jobs import entity_rows
    from tests.support.rules import meta_url
    from tests.support.spark_cluster import submit

    b, rules, store = zone_b
    conn = b.connect("zonesync_app")
    try:
        expected = locate(conn, store, rules, "tenant", "7")
    finally:
        conn.close()
    args = ["--entity", "tenant:7", "--zone", f"b=jdbc:mysql://127.0.0.1:{b.port}/zonesync_app", "--zone-user",
            "b=root", "--meta", meta_url(meta), "--output", str(tmp_path / "rows.json"), "--keys",
            str(tmp_path / "keys")]  # fmt: skip
    job = submit(Path(entity_rows.__file__), args, standalone.url, tmp_path / "submit.log")
    assert job.wait(300) == 0, (tmp_path / "submit.log").read_text()[-3000:]
    out = json.loads((tmp_path / "rows.json").read_text())
    assert out["tables"] == {t: len(v) for t, v in expected.items()} and out["rows"] == sum(map(len, expected.values()))
    written = sorted(
        (row["table_name"], row["idx"])
        for f in (tmp_path / "keys").glob("part-*.json")
        for row in map(json.loads, f.read_text().splitlines())
    )
    assert written == sorted((t, idx) for t, v in expected.items() for idx in v)


def test_the_spark_jobs_entity_argument_is_checked(capsys):
    from spark_jobs import entity_rows

    with pytest.raises(SystemExit):
        entity_rows.parse_args(["--entity", "tenant", "--zone", "b=jdbc:mysql://h/d", "--output", "o"])
    assert "--entity 'tenant': TYPE:ID" in capsys.readouterr().err
