"""Full copy, pure parts: requests refused field by field, where each partition of the
target goes, the chunk predicates, and the landing statements' guards."""

from __future__ import annotations

import pytest

from zonesync.copy.chunks import literal, predicate
from zonesync.copy.merge import pk_text_sql, stage_name
from zonesync.copy.positions import moved
from zonesync.copy.request import CopyRefused, CopyRequest
from zonesync.events import pk_text

pytestmark = pytest.mark.unit

ZONES = {"a": 1, "b": 2, "c": 3}
TABLES = {"tenants": None, "orders": None}


def req(**kw) -> CopyRequest:
    base = dict(source_zone="a", target_zone="b", tables=(), mode="rebuild", reason="disk loss", chunk_rows=1000)
    return CopyRequest(**{**base, **kw})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(target_zone="a"), "to: the target is the source"),
        (dict(source_zone="x"), "from: unknown zone 'x'"),
        (dict(target_zone="d"), "to: unknown zone 'd'"),
        (dict(source_zone="A;drop"), "from: 'A;drop' is not a zone name"),
        (dict(tables=("users",)), "tables: users not replicated"),
        (dict(tables=("tenants", "tenants")), "tables: a table is named twice"),
        (dict(mode="fast"), "mode: 'fast' is not one of"),
        (dict(reason="  "), "reason: say why"),
        (dict(chunk_rows=5), "chunk_rows: 5 is out of range"),
    ],
)
def test_a_bad_request_is_refused_naming_its_field(change, field):
    with pytest.raises(CopyRefused, match="^" + field.replace("(", r"\(")):
        req(**change).resolved(ZONES, TABLES)


def test_no_tables_means_every_replicated_table():
    assert req().resolved(ZONES, TABLES).tables == ("orders", "tenants")
    assert req(tables=("tenants",)).resolved(ZONES, TABLES).tables == ("tenants",)


@pytest.mark.parametrize(
    ("source", "current", "start", "expected"),
    [
        ("c", (50, 9, "running"), (80, 12), (50, 9)),  # behind the start: replays from where it stands
        ("c", (90, 15, "running"), (80, 12), (80, 12)),  # ahead: back to the start (its rows may be lost)
        ("c", (90, 15, "halted"), (80, 12), (80, 12)),  # halted: from the start, the gap behind it copied
        ("c", None, (80, 12), (80, 12)),  # never ran (a new zone): from the start
        ("a", (90, 15, "running"), (80, 12), (90, 15)),  # the copy's source: below the tail it read after
        ("a", (90, 15, "halted"), (120, 30), (120, 30)),  # the source's halted stream: jumps to the tail
    ],
)
def test_where_each_partition_of_the_target_goes(source, current, start, expected):
    assert moved(source, "a", current, start) == expected


def test_chunk_predicates_cover_the_key_space_without_overlap():
    assert predicate(["id"], None, [10]) == "`id` <= 10"
    assert predicate(["id"], [10], None) == "`id` > 10"
    assert predicate(["a", "b"], [1, 2], [3, 4]) == "(`a`, `b`) > (1, 2) AND (`a`, `b`) <= (3, 4)"
    assert predicate(["id"], None, None) == "1 = 1"
    assert literal([7]) == "7"


def test_copied_rows_land_by_the_version_rule():
    from zonesync.copy.merge import insert_statement, key_positions, range_statement, upsert_statement

    cols = ["tenant_id", "_zs_version", "name", "_zs_origin"]
    assert key_positions(cols, ["tenant_id"]) == [0] and key_positions(cols, ["_zs_origin", "name"]) == [2, 1]
    # a key the target lacks: a plain INSERT, the version bound last
    assert insert_statement("app", "tenants", cols) == (
        "INSERT INTO `app`.`tenants` (`tenant_id`, `name`, `_zs_origin`, `_zs_version`) VALUES (?, ?, ?, ?)"
    )
    # a key it holds: every column only when the copied row is newer, and the version last
    up = upsert_statement("app", "tenants", cols)
    assert "`name` = IF(VALUES(`_zs_version`) > `_zs_version`, VALUES(`name`), `name`)" in up
    assert up.endswith("`_zs_version` = GREATEST(`_zs_version`, VALUES(`_zs_version`))")
    # which keys it holds: read under a lock of the chunk's range
    assert range_statement("app", "tenants", ["tenant_id"], [10], [20]) == (
        "SELECT `tenant_id` FROM `app`.`tenants` WHERE `tenant_id` > 10 AND `tenant_id` <= 20 FOR UPDATE"
    )


def test_the_cleanup_deletes_the_chunks_rows_a_tombstone_outranks():
    from zonesync.copy.merge import cleanup_statement

    sql = cleanup_statement("app", "tenants", ["tenant_id"], None, [100])
    assert sql.startswith("DELETE t FROM `app`.`tenants` t JOIN zonesync.tombstones tb ON tb.table_name = 'tenants'")
    assert "tb.pk = CONCAT('[', t.`tenant_id`, ']')" in sql
    assert sql.endswith("WHERE t.`tenant_id` <= 100 AND tb.version >= t.`_zs_version`")


@pytest.mark.parametrize("key", [{"id": 5}, {"b": 2, "a": -1}, {"z": 10, "m": 20, "a": 30}])
def test_the_sql_key_text_is_the_tombstones_key_text(key):
    """The merge looks tombstones up by the text the applier keys them with (events.pk_text)."""
    sql = pk_text_sql("s", list(key))
    text = sql
    for c in key:
        text = text.replace(f"s.`{c}`", str(key[c]))
    pieces = text[len("CONCAT(") : -1].split(", ")
    assert "".join(p.strip("'") for p in pieces) == pk_text(key)


def test_stage_names_are_short_and_stable():
    assert stage_name("r1", "tenants") == stage_name("r1", "tenants") != stage_name("r2", "tenants")
    assert len(stage_name("x" * 250, "t" * 64)) <= 64


@pytest.mark.parametrize(
    ("src", "dst", "src_deleted", "dst_deleted", "real"),
    [
        ({"[1]": (5, 11)}, {"[1]": (5, 11)}, set(), set(), []),  # equal
        ({"[1]": (5, 11)}, {"[1]": (5, 12)}, set(), set(), ["[1]"]),  # same version, other content: real
        ({"[1]": (5, 11)}, {}, set(), set(), ["[1]"]),  # the target lacks a settled row: real
        ({}, {"[1]": (5, 11)}, set(), set(), ["[1]"]),  # the target holds a row the source lacks: real
        ({"[1]": (150, 11)}, {"[1]": (5, 11)}, set(), set(), []),  # updated after the cut: in flight
        ({"[1]": (5, 11)}, {"[1]": (150, 11)}, set(), set(), []),  # updated in the target after the cut
        ({"[1]": (5, 11)}, {}, set(), {"[1]"}, []),  # the target deleted it after the cut
        ({}, {"[1]": (5, 11)}, {"[1]"}, set(), []),  # the source deleted it after the cut
        ({}, {"[1]": (5, 11)}, set(), {"[1]"}, ["[1]"]),  # deleted in the target only: no excuse for the source
    ],
)
def test_verify_counts_only_differences_no_write_in_flight_explains(src, dst, src_deleted, dst_deleted, real):
    from zonesync.copy.verify import real_differences

    assert real_differences(src, dst, src_deleted, dst_deleted, cut=100) == real


def test_progress_gives_the_rate_and_what_is_left():
    import datetime as dt

    from zonesync.copy.chunks import summarize

    t0 = dt.datetime(2026, 1, 1, 12, 0, 0)

    def chunk(n, status, rows=0, at=None):
        return {"table": "tenants", "chunk": n, "status": status, "rows_read": rows, "done_at": at}

    rows = [chunk(0, "done", 1000, t0), chunk(1, "done", 1000, t0 + dt.timedelta(seconds=1)),
            chunk(2, "done", 1000, t0 + dt.timedelta(seconds=2)), chunk(3, "pending"), chunk(4, "pending")]  # fmt: skip
    p = summarize(("tenants", "orders"), rows)["tenants"]
    assert (p["chunks"], p["done"], p["rows"]) == (5, 3, 3000)
    assert p["rate"] == 1000.0 and p["eta_s"] == pytest.approx(2.0)  # the 2000 rows after the first commit, in 2 s
    assert summarize(("orders",), [])["orders"] == {"chunks": 0, "done": 0, "rows": 0, "first": None, "last": None,
                                                   "rate": None, "eta_s": None}  # fmt: skip


def test_progress_after_a_pause_gives_the_pace_since_the_copy_resumed():
    import datetime as dt

    from zonesync.copy.chunks import summarize

    t0 = dt.datetime(2026, 1, 1, 12, 0, 0)
    at = [t0, t0 + dt.timedelta(seconds=1), t0 + dt.timedelta(seconds=301), t0 + dt.timedelta(seconds=303)]
    rows = [{"table": "t", "chunk": n, "status": "done", "rows_read": 1000, "done_at": a} for n, a in enumerate(at)]
    rows += [{"table": "t", "chunk": 4 + n, "status": "pending", "rows_read": 0, "done_at": None} for n in range(4)]
    p = summarize(("t",), rows)["t"]
    # killed for 5 min after two chunks: the rate is the 1000 rows of the 2 s since the
    # first commit after the pause, not 4000 rows over 303 s
    assert (p["done"], p["rows"], p["first"], p["last"]) == (4, 4000, at[2], at[3])
    assert p["rate"] == 500.0 and p["eta_s"] == pytest.approx(8.0)
