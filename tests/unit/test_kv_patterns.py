"""KV key patterns, their radix tree and the overlap check (zonesync/tagging; seed 004
S004-07: keys matched per repo, the entity id extracted; S004-08: ambiguous patterns
refused at registration, a key still matching two ways reported, never tagged)."""

from __future__ import annotations

import random

import pytest

from zonesync.tagging.kv_patterns import PatternError, parse
from zonesync.tagging.overlap import common_key
from zonesync.tagging.radix import AmbiguousKey, PatternTree

pytestmark = pytest.mark.unit

SEPARATED = {"not_contains": "_"}


def _oracle(pattern, key: str) -> list[dict]:
    """Every split of `key` by `pattern`, by brute force (the tree must find the same)."""
    out = []

    def walk(i: int, pos: int, values: dict):
        if i == len(pattern.tokens):
            if pos == len(key):
                out.append(dict(values))
            return
        token = pattern.tokens[i]
        if isinstance(token, str):
            if key.startswith(token, pos):
                walk(i + 1, pos + len(token), values)
            return
        name, var = token
        for end in range(pos + 1, len(key) + 1):
            if var.accepts(key[pos:end]):
                walk(i + 1, end, {**values, name: key[pos:end]})

    walk(0, 0, {})
    return out


def test_the_seeds_key_matches_both_of_its_patterns_and_is_reported_not_tagged():
    loose = PatternTree([parse("{{table_id}}_{{rev}}_{{rec_id}}", entity_field="rec_id"),
                         parse("{{table_id}}_{{rev}}_{{rec_id}}_{{level}}", entity_field="rec_id")])  # fmt: skip
    with pytest.raises(AmbiguousKey, match=r"key 'tableStr_1000_abccc_1' matches .* not tagged"):
        loose.identify("tableStr_1000_abccc_1")
    strict = PatternTree([
        parse("{{table_id}}_{{rev}}_{{rec_id}}", dict.fromkeys(("table_id", "rev", "rec_id"), SEPARATED),
              entity_field="rec_id"),
        parse("{{table_id}}_{{rev}}_{{rec_id}}_{{level}}",
              {**dict.fromkeys(("table_id", "rev", "rec_id"), SEPARATED), "level": {"digits": True}},
              entity_field="rec_id")])  # fmt: skip
    pattern, entity = strict.identify("tableStr_1000_abccc_1")
    assert (pattern.text, entity) == ("{{table_id}}_{{rev}}_{{rec_id}}_{{level}}", "abccc")
    assert strict.identify("tableStr_1000_abccc")[1] == "abccc"
    assert strict.identify("tableStr_1000_abccc_x") is None  # level is digits


def test_a_key_gives_its_entity_id_and_unknown_keys_nothing():
    tree = PatternTree([
        parse("{{env}}:chat_last_msg_id:{{message_id}}", {"env": {"not_contains": ":"},
              "message_id": {"digits": True}}, "message", "message_id"),
        parse("{{env}}:chat_title:{{chat_id}}", {"env": {"not_contains": ":"}, "chat_id": {"length": 6}},
              "chat", "chat_id")])  # fmt: skip
    assert tree.identify("prod:chat_last_msg_id:90210")[1] == "90210"
    assert tree.identify("boe:chat_title:ab12cd")[1] == "ab12cd"
    assert tree.identify("boe:chat_title:ab12c") is None  # length 6
    assert tree.identify("prod:chat_last_msg_id:") is None  # a variable is never empty
    assert tree.identify("nothing:here") is None


@pytest.mark.parametrize(
    "text, where, words",
    [("plain:key", None, "has no {{variable}}"),
     ("{{a}}{{b}}", None, "no text between them: put a separator there, or give a a length"),
     ("{{a}}:{{a}}", None, "variable a appears twice"),
     ("{{a b}}:x", None, "needs a plain name"),
     ("{{a}}:x", {"b": {"digits": True}}, "where.b: no such variable"),
     ("{{a}}:x", {"a": {"length": 0}}, "where.a.length: a whole number"),
     ("{{a}}:x", {"a": {"digits": "yes"}}, "where.a.digits: write true or false"),
     ("{{a}}:x", {"a": {"shape": 1}}, "where.a.shape: not a constraint"),
     ("{{a}}:x", {"a": {"contains": "q", "not_contains": ["q"]}}, "cannot both contain and not contain"),
     ("{{a}:x", None, "unclosed or stray")],
)  # fmt: skip
def test_a_bad_pattern_is_refused_in_one_line_naming_it(text, where, words):
    with pytest.raises(PatternError) as refused:
        parse(text, where)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def _random_pattern(rng: random.Random):
    tokens, where, text = rng.randint(1, 3), {}, ""
    for i in range(tokens):
        if i or rng.random() < 0.5:
            text += rng.choice(["_", ":", "k_", ":v:", "ab"])
        name = f"v{i}"
        text += "{{" + name + "}}"
        spec = rng.choice([{}, {"digits": True}, {"length": rng.randint(1, 3)}, {"contains": "a"},
                           {"not_contains": "_"}, {"digits": True, "length": 2}])  # fmt: skip
        if spec:
            where[name] = spec
    if rng.random() < 0.5:
        text += rng.choice(["_", ":end", "b"])
    return parse(text, where)


def _random_key(rng: random.Random) -> str:
    return "".join(rng.choice("ab_:k0123v") for _ in range(rng.randint(1, 9)))


def test_the_tree_finds_exactly_the_splits_brute_force_finds():
    rng = random.Random(11)
    for _ in range(150):
        patterns = [_random_pattern(rng) for _ in range(rng.randint(1, 5))]
        tree = PatternTree(patterns)
        for key in [_random_key(rng) for _ in range(60)]:
            got = sorted((p.text, sorted(v.items())) for p, v in tree.match(key))
            want = sorted((p.text, sorted(v.items())) for p in patterns for v in _oracle(p, key))
            assert got == want, (key, [p.text for p in patterns])


def test_overlap_names_a_key_both_match_or_none_exists():
    rng = random.Random(5)
    for _ in range(300):
        a, b = _random_pattern(rng), _random_pattern(rng)
        key = common_key(a, b)
        if key:
            assert _oracle(a, key) and _oracle(b, key), (a.text, b.text, key)
        else:
            assert key is None
            # and no short key of theirs matches both (400 random keys over their characters)
            for k in (_random_key(rng) for _ in range(400)):
                assert not (_oracle(a, k) and _oracle(b, k)), (a.text, b.text, k)


def test_the_regex_baseline_agrees_on_unambiguous_patterns():
    p = parse("{{env}}:chat_last_msg_id:{{message_id}}", {"env": {"not_contains": ":"},
              "message_id": {"digits": True}})  # fmt: skip
    compiled = p.regex()
    assert p.regex_match(compiled, "prod:chat_last_msg_id:7") == {"env": "prod", "message_id": "7"}
    assert p.regex_match(compiled, "a:b:chat_last_msg_id:7") is None


def test_the_overlap_index_finds_every_clash_all_pairs_would():
    from zonesync.tagging.overlap import OverlapIndex

    rng = random.Random(3)
    for _ in range(40):
        index, registered = OverlapIndex(), []
        for _ in range(8):
            p = _random_pattern(rng)
            if rng.random() < 0.5:  # a leading literal of its own, or one another pattern's is a prefix of
                p = parse(rng.choice(["k", "k_", "ka", ":"]) + p.text, p.where)
            got = {o.text for o, _ in index.conflicts(p)}
            want = {o.text for o in registered if common_key(o, p) is not None}
            assert got == want, (p.text, [o.text for o in registered])
            index.add(p)
            registered.append(p)
