"""Rule files: bad input is refused with the path of the field and the fix."""

from __future__ import annotations

import pytest
import yaml

from zonesync.rules import RuleSetError, load_file, parse
from zonesync.rules.check import RuleCheckError, check, problems

pytestmark = pytest.mark.unit

GOOD = {
    "zsid_space": {"min": 0, "max": 99},
    "rules": [{"zsids": "0-49", "zone": "a"}, {"zsids": "50-99", "zone": "b", "status": "ACTIVE"}],
    "tables": {"orders": {"column": "tenant_id", "function": "modulo", "buckets": 100}},
}


def doc(**changes):
    import copy

    d = copy.deepcopy(GOOD)
    d.update(changes)
    return d


def test_good_document_round_trips():
    rules = parse(GOOD)
    assert parse(rules.to_doc()) == rules
    check(rules, {"a", "b"})


@pytest.mark.parametrize(
    "bad, path, words",
    [
        (doc(rules=[{"zsids": "0-x", "zone": "a"}]), "rules[0].zsids", "not valid"),
        (doc(rules=[{"zsids": "0-99", "zone": "A"}]), "rules[0].zone", "does not match"),
        (doc(rules=[{"zsids": "0-99", "zone": "a", "status": "OPEN"}]), "rules[0].status", "is not one of"),
        (doc(rules=[{"zsids": "0-99", "zone": "a", "owner": "b"}]), "rules[0]", "Additional properties"),
        (doc(rules=[]), "rules", "should be non-empty"),
        (doc(tables={"orders": {"column": "t", "function": "modulo"}}), "tables.orders", "'buckets' is a required"),
        (doc(tables={"orders": {"column": "t", "function": "hash"}}), "tables.orders.function", "is not one of"),
        (doc(tables={"bad name": {"column": "t", "function": "map", "map": {}}}), "tables", "does not match"),
        (doc(zsid_space={"min": 0}), "zsid_space", "'max' is a required"),
        (doc(rules=[{"zsids": "60-10", "zone": "a"}]), "rules[0].zsids", "runs backwards"),
        (doc(rules=[{"zsids": "0-150", "zone": "a"}]), "rules[0].zsids", "outside the ZSID space"),
        (doc(tables={"o": {"column": "t", "function": "modulo", "buckets": 101}}), "tables.o.buckets", "beyond"),
        (doc(tables={"o": {"column": "t", "function": "map", "map": {"x": 500}}}), "tables.o.map.x", "outside"),
        (
            doc(tables={"o": {"column": "t", "function": "range", "ranges": [{"lo": 9, "hi": 1, "zsid": 1}]}}),
            "tables.o.ranges[0]",
            "above hi",
        ),
    ],
)
def test_bad_documents_name_the_field(bad, path, words):
    with pytest.raises(RuleSetError) as err:
        parse(bad, "r.yaml")
    text = str(err.value)
    assert text.startswith("r.yaml: ") and f"{path}: " in text and words in text, text


def test_bad_yaml_and_missing_file(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("rules: [\n  - {zsids: 1\n")
    with pytest.raises(RuleSetError, match="not valid YAML at line"):
        load_file(f)
    with pytest.raises(RuleSetError, match="cannot read the file"):
        load_file(tmp_path / "missing.yaml")


def test_files_that_are_not_utf8_text_name_the_byte_and_the_fix(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_bytes(yaml.safe_dump(GOOD).encode() + "# café\n".encode("latin-1"))
    with pytest.raises(RuleSetError) as err:
        load_file(f)
    text = str(err.value)
    assert text.startswith(f"{f}: not UTF-8: byte 0xe9") and "(line " in text, text
    assert "must be UTF-8 text" in text and "iconv -f latin1 -t utf-8" in text and "\n" not in text
    f.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    with pytest.raises(RuleSetError, match=r"looks binary: byte 0x00 at offset 7 \(line 1, column 8\) is not text"):
        load_file(f)
    f.write_bytes(b"rules: [\x01]\n")
    with pytest.raises(RuleSetError, match=r"line 1, column 9: control character U\+0001 is not allowed"):
        load_file(f)
    with pytest.raises(RuleSetError, match="is a directory"):
        load_file(tmp_path)


def test_bom_is_accepted_and_empty_files_are_refused(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(GOOD).encode())
    assert load_file(f) == parse(GOOD)
    for empty in (b"", b"\xef\xbb\xbf", b"# nothing yet\n"):
        f.write_bytes(empty)
        with pytest.raises(RuleSetError, match=r"the file is empty \(or only comments\): write a rule set"):
            load_file(f)


def test_check_names_zsids_and_zones():
    overlap = parse(doc(rules=[{"zsids": "0-60", "zone": "a"}, {"zsids": "50-99", "zone": "b"}]))
    with pytest.raises(RuleCheckError, match=r"ZSIDs 50-60: covered by more than one rule \(zones a, b\)"):
        check(overlap, {"a", "b"})
    gap = parse(doc(rules=[{"zsids": "0-40", "zone": "a"}, {"zsids": "50-99", "zone": "b"}]))
    with pytest.raises(RuleCheckError, match="ZSIDs 41-49: no rule covers them"):
        check(gap, {"a", "b"})
    unknown = parse(doc(rules=[{"zsids": "0-49", "zone": "a"}, {"zsids": "50-99", "zone": "q"}]))
    with pytest.raises(RuleCheckError, match="owner zone q is not a known zone"):
        check(unknown, {"a", "b"})
    blocked = parse(doc(rules=[{"zsids": "0-49", "zone": "a", "status": "BLOCK"}, {"zsids": "50-99", "zone": "b"}]))
    with pytest.raises(RuleCheckError, match="ZSIDs 0-49: writable in no zone"):
        check(blocked, {"a", "b"})
    check(blocked, {"a", "b"}, require_writable=False)  # a staged switch version is fine


def test_problems_merge_into_whole_ranges():
    rules = parse(doc(rules=[{"zsids": 5, "zone": "a"}]))
    found = problems(rules, {"a"})
    assert [(p.lo, p.hi, p.kind) for p in found] == [(0, 4, "gap"), (6, 99, "gap")]
