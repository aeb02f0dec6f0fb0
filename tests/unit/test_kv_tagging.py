"""KV tagging's pure parts: a key's decision in the guard's state (dal/state.py), the KV
tagger's segments of log entries (tagging/kv_tagger.py), the KV endpoint's settings."""

from __future__ import annotations

import json

import pytest

from zonesync import config
from zonesync.dal.errors import (
    EntityWriteStopped,
    KeyAmbiguous,
    KeyUntagged,
    WrongZone,
    ZoneReshardingBlocked,
    ZsidUndetermined,
)
from zonesync.dal.state import GuardState
from zonesync.rules import parse
from zonesync.runtime.kv_endpoint import kv_endpoint, parse_repos
from zonesync.tagging.kv_patterns import parse as parse_pattern
from zonesync.tagging.kv_tagger import entry_version, kv_segments
from zonesync.tagging.radix import PatternTree
from zonesync.tagging.rules import parse as parse_tags
from zonesync.tagging.tag_store import KV_TABLE, entries_text, fold

pytestmark = pytest.mark.unit

RULES = parse({
    "zsid_space": {"min": 0, "max": 9},
    "rules": [{"zsids": "0-3", "zone": "a"}, {"zsids": "4-5", "zone": "b", "status": "BLOCK"},
              {"zsids": "6-9", "zone": "b"}],
    "tables": {"orders": {"column": "tenant", "function": "modulo", "buckets": 10,
                          "entity": {"type": "tenant", "column": "tenant"}}},
})  # fmt: skip
TAGS = parse_tags({"kv": [
    {"repo": "sessions", "pattern": "{{env}}:session:{{tenant}}:{{token}}", "entity": {"type": "tenant",
     "field": "tenant"}, "where": {"env": {"not_contains": ":"}, "tenant": {"digits": True}}},
    {"repo": "sessions", "pattern": "user:{{user}}", "entity": {"type": "user", "field": "user"},
     "where": {"user": {"not_contains": ":"}}},
]})  # fmt: skip


def _state(entities=None, trees=None) -> GuardState:
    return GuardState(7, "a", RULES, entities or {}, 3, TAGS.trees() if trees is None else trees)


def test_a_key_is_judged_by_the_entity_its_pattern_names():
    s = _state({("tenant", "2"): ("b", False), ("tenant", "3"): ("a", True), ("user", "u1"): ("a", False)})
    assert s.decide_key("sessions", "prod:session:1:x").entity == ("tenant", "1")  # ZSID 1: a's
    assert s.decide_key("sessions", "user:u1").entity == ("user", "u1")  # registered in a
    cases = [
        ("prod:session:2:x", WrongZone, "tenant 2 is owned by zone b"),  # registered in b (its ZSID is a's)
        ("prod:session:3:x", EntityWriteStopped, "tenant 3 are stopped"),
        ("prod:session:4:x", ZoneReshardingBlocked, "ZSID 4 is BLOCK"),
        ("prod:session:8:x", WrongZone, "owned by zone b"),
        ("user:u2", ZsidUndetermined, "no table of the rules takes its ZSID from a user id"),
        ("prod:session:x:1", KeyUntagged, "matches no pattern of repo sessions"),
        ("prod:sess:1:x", KeyUntagged, "matches no pattern"),
    ]
    for key, error, text in cases:
        with pytest.raises(error, match=text):
            s.decide_key("sessions", key)
    with pytest.raises(KeyUntagged, match="repo chat has no KV pattern in tag rules v3"):
        s.decide_key("chat", "user:u1")
    with pytest.raises(ZsidUndetermined, match="no rules published"):
        GuardState(1, "a", None, {}, 3, TAGS.trees()).decide_key("sessions", "user:u1")


def test_a_key_two_patterns_match_is_refused_naming_both():
    pair = [parse_pattern("{{t}}_{{rev}}_{{rec}}", {}, "tenant", "rev"),
            parse_pattern("{{t}}_{{rev}}_{{rec}}_{{level}}", {}, "tenant", "rev")]  # fmt: skip
    s = _state(trees={"chat": PatternTree(pair)})
    with pytest.raises(KeyAmbiguous) as err:
        s.decide_key("chat", "tableStr_1_abccc_1")
    assert err.value.patterns == ["{{t}}_{{rev}}_{{rec}}", "{{t}}_{{rev}}_{{rec}}_{{level}}"]
    assert s.decide_key("chat", "tableStr_1_abc").entity == ("tenant", "1")
    # the KV tagger, meeting such a key in a log, alerts it and tags nothing of it
    entries = [(b"9-0", {b"op": b"set", b"key": b"tableStr_1_abccc_1"}), (b"9-1", {b"op": b"set", b"key": b"t_2_r"})]
    segments, refused = kv_segments(entries, PatternTree(pair))
    assert [(k, i) for k, i, _, _ in refused] == [("kv_ambiguous", "9-0")]
    assert segments == [(("tenant", "2", KV_TABLE), {json.dumps("t_2_r"): entry_version("9-1") << 1})]


def _entry(i: str, op: str, key) -> tuple:
    return (i.encode(), {b"op": op.encode(), b"key": key, b"entity_type": b"tenant"})


def test_log_entries_make_one_segment_per_entity_newest_entry_per_key():
    entries = [
        _entry("1700000000000-0", "set", b"prod:session:1:a"),
        _entry("1700000000000-1", "set", b"prod:session:1:b"),
        _entry("1700000000000-2", "del", b"prod:session:1:a"),
        _entry("1700000000001-0", "set", b"user:u9"),
        _entry("1700000000001-1", "set", b"nobody:knows"),
        _entry("1700000000001-2", "set", b"\xff\xfe"),
        (b"1700000000001-3", {b"op": b"set"}),
    ]
    segments, refused = kv_segments(entries, TAGS.trees()["sessions"])
    by = dict(segments)
    v = entry_version
    assert by == {
        ("tenant", "1", KV_TABLE): {json.dumps("prod:session:1:a"): v("1700000000000-2") << 1 | 1,
                                    json.dumps("prod:session:1:b"): v("1700000000000-1") << 1},
        ("user", "u9", KV_TABLE): {json.dumps("user:u9"): v("1700000000001-0") << 1},
    }  # fmt: skip
    assert [(kind, i) for kind, i, _, _ in refused] == [
        ("kv_untaggable", "1700000000001-1"), ("kv_untaggable", "1700000000001-2"),
        ("kv_untaggable", "1700000000001-3")]  # fmt: skip
    assert kv_segments(entries[:1], None)[1][0][3] == "matches no pattern of the repo"


def test_entry_versions_follow_the_log_and_a_replay_folds_to_the_same_tags():
    ids = ["1-0", "1-1", "1-1048575", "2-0", "1700000000000-0", "1700000000000-7"]
    assert [entry_version(i) for i in ids] == sorted(entry_version(i) for i in ids)
    assert len({entry_version(i) for i in ids}) == len(ids)
    first = [_entry("5-0", "set", b"user:u1"), _entry("5-1", "set", b"user:u2")]
    later = [_entry("6-0", "del", b"user:u1")]
    tree = TAGS.trees()["sessions"]
    texts = [entries_text(e) for batch in (first, later, first, later) for _, e in kv_segments(batch, tree)[0]]
    folded = fold(texts)
    assert folded == fold(texts[:3]) == {json.dumps("user:u1"): entry_version("6-0") << 1 | 1,
                                         json.dumps("user:u2"): entry_version("5-1") << 1}  # fmt: skip


def test_kv_settings_are_checked_in_one_line_naming_the_variable(tmp_path):
    assert parse_repos("sessions=0, chat_cache=3") == (("sessions", 0), ("chat_cache", 3))
    for bad, text in [("sessions", "not repo=database"), ("sessions=16", "not repo=database"),
                      ("a=1,a=2", "appears twice"), ("a=1,b=1", "appears twice"), ("x-y=1", "not repo")]:  # fmt: skip
        with pytest.raises(config.ConfigError, match=text):
            parse_repos(bad)
    prod = {"ZONESYNC_STATE_DIR": str(tmp_path), "ZONESYNC_DEV": "0"}
    with pytest.raises(config.ConfigError, match="ZONESYNC_KV_A_URL is not set: give zone a's KV store as redis://"):
        kv_endpoint("a", prod)
    with pytest.raises(config.ConfigError, match="ZONESYNC_KV_REPOS is not set"):
        kv_endpoint("a", {**prod, "ZONESYNC_KV_A_URL": "redis://h:7000"})
    with pytest.raises(config.ConfigError, match="must look like redis://"):
        kv_endpoint("a", {**prod, "ZONESYNC_KV_A_URL": "mysql://h:7000", "ZONESYNC_KV_REPOS": "s=0"})
    ep = kv_endpoint("b", {**prod, "ZONESYNC_KV_B_URL": "redis://:s%40cret@h:7000", "ZONESYNC_KV_REPOS": "s=2"})
    assert (ep.host, ep.port, ep.db("s"), ep.password) == ("h", 7000, 2, "s@cret") and "cret" not in repr(ep)
    with pytest.raises(config.ConfigError, match="repo 'x' is not a KV repo of zone b"):
        ep.db("x")
    dev = kv_endpoint("c", {"ZONESYNC_STATE_DIR": str(tmp_path), "ZONESYNC_DEV": "1", "ZONESYNC_BASE_PORT": "30000"})
    assert (dev.port, dev.repos) == (30063, (("sessions", 0), ("chat_cache", 1)))
    with pytest.raises(config.ConfigError, match="6379, the machine's own Redis"):
        config.load({"ZONESYNC_KV_BASE_PORT": "6378"})
