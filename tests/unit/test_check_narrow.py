"""A differing chunk narrowed to the sub-ranges whose numbers differ (zonesync.check.narrow),
pure: the SQL each zone runs, and the sub-ranges chosen from their answers."""

from __future__ import annotations

from zonesync.check import narrow

COLUMNS = [("id", "bigint"), ("name", "varchar"), ("_zs_origin", "int"), ("_zs_version", "bigint")]


def test_a_chunk_with_both_bounds_needs_no_span_query_and_splits_in_equal_steps():
    assert narrow.known_span(["id"], [100], [200]) == (101, 200)
    assert narrow.known_span(["id"], None, [200]) is None and narrow.known_span(["id"], [100], None) is None
    assert narrow.step_of(101, 200) == 2 and narrow.step_of(1, 64) == 1 and narrow.step_of(5, 5) == 1
    assert narrow.step_of(1, 100_000) == 1563  # 64 sub-ranges of a 100k-key chunk
    assert narrow.splittable(["id"]) and not narrow.splittable(["tenant_id", "id"])


def test_the_bucket_query_is_the_chunks_checksum_grouped_by_sub_range():
    sql = narrow.bucket_query("t", COLUMNS, ["id"], [100], [200], 101, 2, nullable={"name"}, where="`x` = 1")
    assert sql.startswith("SELECT (`id` - 101) DIV 2, COUNT(*), COALESCE(BIT_XOR(CRC32(CONCAT_WS('#', ")
    assert sql.endswith("FROM `t` WHERE `id` > 100 AND `id` <= 200 AND `x` = 1 GROUP BY 1"), sql
    assert narrow.span_query("t", ["id"], None, [200]) == "SELECT MIN(`id`), MAX(`id`) FROM `t` WHERE `id` <= 200"


def test_the_span_of_an_open_chunk_covers_every_zones_rows():
    assert narrow.merged_span([("5", "90"), ("\\N", "\\N"), ("3", "40")]) == (3, 90)
    assert narrow.merged_span([("\\N", "\\N"), ("", "")]) is None


def test_only_sub_ranges_whose_count_or_checksum_differ_are_kept():
    buckets = {
        "a": [["0", "8", "111"], ["1", "8", "222"], ["2", "8", "333"], ["5", "1", "9"]],
        "b": [["0", "8", "111"], ["1", "8", "999"], ["2", "8", "333"]],  # 1 changed, 5 missing
        "c": [["0", "8", "111"], ["1", "8", "222"], ["2", "8", "333"], ["7", "1", "4"]],  # 7 extra
    }
    assert narrow.differing(buckets) == [1, 5, 7]
    assert narrow.differing({"a": [[""]], "b": [[""]]}) == []  # empty everywhere: settled


def test_sub_chunks_stay_inside_their_chunk():
    chunk = {"chunk": 3, "lo": [100], "hi": [200], "status": "differ", "zones": {}}
    got = narrow.sub_chunks(chunk, ["id"], 101, 200, 8, [0, 12])
    assert [(c["lo"], c["hi"], c["chunk"], c["status"]) for c in got] == [([100], [108], 3, "differ"),
                                                                          ([196], [200], 3, "differ")]  # fmt: skip
    open_chunk = {"chunk": 0, "lo": None, "hi": [50], "zones": {}}  # its span from the zones: 7..50
    assert [(c["lo"], c["hi"]) for c in narrow.sub_chunks(open_chunk, ["id"], 7, 50, 1, [0, 43])] == [
        ([6], [7]), ([49], [50])]  # fmt: skip
