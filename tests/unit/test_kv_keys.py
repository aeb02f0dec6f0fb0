"""A migration's KV keys (migrate/kv_keys.py): which repos move, how two copies of a key
are compared, the outcome's words."""

from __future__ import annotations

from zonesync.migrate.kv_keys import _differs, repos_of, summary
from zonesync.tagging.rules import parse

RULES = {
    "kv": [
        {"repo": "sessions", "pattern": "s:{{tenant_id}}:{{t}}", "entity": {"type": "tenant", "field": "tenant_id"}},
        {"repo": "chat_cache", "pattern": "c:{{chat_id}}", "entity": {"type": "chat", "field": "chat_id"}},
    ]
}


def test_the_repos_that_move_are_those_holding_keys_of_the_les_types():
    rules = parse(RULES)
    assert repos_of(rules, {"tenant"}) == ["sessions"]
    assert repos_of(rules, {"tenant", "chat"}) == ["chat_cache", "sessions"]
    assert repos_of(rules, {"user"}) == [] and repos_of(None, {"tenant"}) == []


def test_two_copies_of_a_key_differ_by_presence_value_or_expiry_not_by_the_ttl_left():
    assert _differs((None, -2), (None, -2), "a", "b") is None
    assert _differs((b"x", 5000), (b"x", 4000), "a", "b") is None  # the TTL ran down meanwhile
    assert _differs((b"x", -1), (None, -2), "a", "b") == "only in zone a"
    assert _differs((None, -2), (b"x", -1), "a", "b") == "only in zone b"
    assert _differs((b"x", -1), (b"y", -1), "a", "b") == "value differs"
    assert _differs((b"x", 5000), (b"x", -1), "a", "b") == "expires in zone a only"


def test_the_outcome_names_the_keys_moved_per_repo():
    assert summary({}) == ""
    assert summary({"sessions": (12, 3)}) == "; KV keys moved: sessions 12 (3 caught up in the window)"
