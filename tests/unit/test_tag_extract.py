"""Tag entries from change messages (tagging/extract.py) and the tag store's fold
(tagging/tag_store.fold): an entity's own segments tell which rows are its own, whatever
order the zones' topics are read in, however often a topic is read again."""

from __future__ import annotations

import random

import pytest

from zonesync.events import ChangeEvent, EventError, encode_messages
from zonesync.tagging.extract import Extractor, TagBatch
from zonesync.tagging.rules import parse
from zonesync.tagging.tag_store import entries_text, fold, render_segments

pytestmark = pytest.mark.unit

RULES = parse({"mysql": [
    {"repo": "app", "table": "orders", "index_keys": ["code"], "entity": {"type": "tenant", "field": "tenant_id"}},
    {"repo": "app", "table": "pairs", "index_keys": ["a", "b"], "entity": {"type": "tenant", "field": "t"}},
    {"repo": "other", "table": "orders", "index_keys": ["id"], "entity": {"type": "tenant", "field": "tenant_id"}},
]})  # fmt: skip


def _event(i, table, op, old, new, version, zone="a"):
    return ChangeEvent(i + 1, i, zone, 1, table, {"id": (new or old)["id"]}, op, old, new, version, "x", 0, 1, 0, 0)


def _live(segments: dict) -> dict[str, dict[str, set]]:
    """entity id -> table -> idx of its live rows, folding each group's segments in order."""
    out: dict = {}
    for (_, eid, table), texts in segments.items():
        live = {idx for idx, packed in fold(texts).items() if not packed & 1}
        if live:
            out.setdefault(eid, {})[table] = live
    return out


def test_rows_sharing_unique_key_values_are_one_entry():
    """S004-10: five rows whose unique key is (1, NULL) give one entry, fetched once."""
    ex = Extractor(RULES, "app")
    events = [_event(i, "pairs", "insert", None, {"id": i, "a": 1, "b": None, "t": 5}, 10 + i) for i in range(5)]
    batch = TagBatch(ex)
    for raw in encode_messages(events):
        batch.add(ex.events(raw))
    assert batch.groups == {("tenant", "5", "pairs"): {"[1,null]": (14, 0)}} and batch.untaggable == 0


def test_unregistered_tables_and_repos_are_skipped_and_rows_without_their_entity_are_untaggable():
    ex = Extractor(RULES, "app")
    events = [
        _event(0, "notes", "insert", None, {"id": 1, "tenant_id": 3}, 5),
        _event(1, "orders", "insert", None, {"id": 2, "code": "k2", "tenant_id": None}, 6),  # a NULL entity
        _event(2, "orders", "insert", None, {"id": 3, "tenant_id": 3}, 7),  # no unique key in the image
        _event(3, "orders", "insert", None, {"id": 4, "code": "x" * 600, "tenant_id": 3}, 8),  # longer than kept
        _event(4, "orders", "insert", None, {"id": 5, "code": 'a\t"b"\\', "tenant_id": "t\t1"}, 9),
    ]
    batch = TagBatch(ex)
    batch.add(ex.events(encode_messages(events)[0]))
    assert batch.untaggable == 3
    assert batch.groups == {("tenant", "t\t1", "orders"): {'["a\\t\\"b\\"\\\\"]': (9, 0)}}
    # the other repo's rule of the same table reads another column as its unique key
    other = Extractor(RULES, "other")
    batch = TagBatch(other)
    batch.add(other.events(encode_messages(events)[0]))
    assert batch.untaggable == 1 and set(batch.groups[("tenant", "3", "orders")]) == {"[3]", "[4]"}


def test_an_update_that_changes_neither_key_nor_entity_writes_nothing_a_move_writes_both_sides():
    ex = Extractor(RULES, "app")
    row = {"id": 1, "code": "k", "tenant_id": 7, "amount": 1}
    events = [
        _event(0, "orders", "update", row, {**row, "amount": 2}, 20),
        _event(1, "orders", "update", {**row, "amount": 2}, {**row, "amount": 2, "tenant_id": 8}, 21),
        _event(2, "orders", "update", {**row, "tenant_id": 8}, {**row, "tenant_id": 8, "code": "k2"}, 22),
        _event(3, "orders", "delete", {**row, "tenant_id": 8, "code": "k2"}, None, 23),
    ]
    batch = TagBatch(ex)
    batch.add(ex.events(encode_messages(events)[0]))
    assert batch.groups == {
        ("tenant", "7", "orders"): {'["k"]': (21, 1)},
        ("tenant", "8", "orders"): {'["k"]': (22, 1), '["k2"]': (23, 1)},
    }


def test_a_message_the_decoders_refuse_is_named_and_a_lone_document_is_read():
    ex = Extractor(RULES, "app")
    with pytest.raises(EventError, match="not JSON"):
        ex.events(b"[{not json")
    with pytest.raises(EventError, match="without a new row"):
        ex.events(b'[{"lsn":1,"prev_lsn":0,"source_zone":"a","origin_zone":1,"table":"orders","pk":{"id":1},'
                  b'"op":"insert","old":null,"new":null,"version":1,"txn_id":"x","row_index":0,"row_count":1,'
                  b'"commit_ts":0,"partition":0}]')  # fmt: skip
    lone = _event(0, "orders", "insert", None, {"id": 1, "code": "k", "tenant_id": 4}, 3).to_json()
    (event,) = ex.events(lone)
    assert (event.table, event.op, event.version, event.lsn) == ("orders", "insert", 3, 1)


def test_fold_keeps_the_newest_entry_and_the_later_batch_on_a_tie():
    first = entries_text({"[1]": 5 << 1, "[2]": 5 << 1})
    second = entries_text({"[1]": 4 << 1 | 1, "[2]": 5 << 1 | 1, "[3]": 1 << 1})
    assert first == "[1]\t5\t0\n[2]\t5\t0"
    assert fold([first, second]) == {"[1]": 5 << 1, "[2]": 5 << 1 | 1, "[3]": 1 << 1}


def test_an_entity_met_as_a_number_and_as_text_is_one_segment():
    ex = Extractor(RULES, "app")
    batch = TagBatch(ex)
    batch.add(ex.events(encode_messages([
        _event(0, "orders", "insert", None, {"id": 1, "code": 1, "tenant_id": 7}, 5),
        _event(1, "orders", "insert", None, {"id": 2, "code": 2, "tenant_id": "7"}, 6),
        _event(2, "orders", "update", {"id": 1, "code": 1, "tenant_id": 7}, {"id": 1, "code": 1, "tenant_id": "7"}, 7),
    ])[0]))  # fmt: skip
    # (the update changes the entity's type, not its id: no entry)
    assert batch.groups == {("tenant", "7", "orders"): {"[1]": (5, 0), "[2]": (6, 0)}}


@pytest.mark.parametrize("native", [True, False], ids=["C loop", "Python loop"])
@pytest.mark.parametrize("seed", range(25))
def test_shuffled_zone_topics_and_replays_fold_to_the_final_rows(seed, native):
    """Rows inserted, moved between tenants, re-keyed (a freed key taken by another row),
    deleted, in whichever zone owns them at the time (ownership moves between zones, so one
    row's history spans topics); the three topics read interleaved at random, in batches
    of random size, one of them read again from a random point (its positions lost): each
    tenant's folded segments hold exactly the rows the tenant has at the end."""
    rng = random.Random(seed)
    topics: dict[str, list] = {"a": [], "b": [], "c": []}
    rows: dict[int, dict] = {}
    owner: dict[int, str] = {}
    version, next_id, used = 100, 1, set()

    def emit(op, old, new):
        nonlocal version
        version += 1
        rid = (new or old)["id"]
        topic = topics[owner[rid]]
        topic.append(_event(len(topic), "orders", op, old, new, version, owner[rid]))

    for _ in range(400):
        act = rng.random()
        if act < 0.3 or not rows:
            code = rng.choice([c for c in (n for n in range(60)) if c not in used] or [-1])
            if code in used:
                continue
            rid, next_id = next_id, next_id + 1
            owner[rid] = rng.choice("abc")
            # integer and text keys and entities: the C loop takes some inserts, Python the rest
            tenant = rng.randrange(5)
            rows[rid] = {"id": rid, "code": code if rng.random() < 0.7 else f"k{code}",
                         "tenant_id": tenant if rng.random() < 0.7 else str(tenant), "amount": 0}  # fmt: skip
            used.add(code)
            emit("insert", None, rows[rid])
            continue
        rid = rng.choice(list(rows))
        if rng.random() < 0.15:
            owner[rid] = rng.choice("abc")  # a zone switch: its next changes in another topic
        old = rows[rid]
        if act < 0.5:
            new = {**old, "tenant_id": rng.randrange(5)}
        elif act < 0.65:
            free = [c for c in range(60) if c not in used]
            if not free:
                continue
            new = {**old, "code": rng.choice(free)}
            used.discard(int(str(old["code"]).lstrip("k")))
            used.add(new["code"])
        elif act < 0.8:
            new = {**old, "amount": old["amount"] + 1}
        else:
            del rows[rid]
            used.discard(int(str(old["code"]).lstrip("k")))
            emit("delete", old, None)
            continue
        rows[rid] = new
        emit("update", old, new)

    # read: the topics interleaved at random, each in its own order; zone b's read again
    # from a random point once all is read (its positions lost)
    ex = Extractor(RULES, "app")
    cursors = {z: 0 for z in topics}
    reads = []
    while any(cursors[z] < len(topics[z]) for z in topics):
        z = rng.choice([z for z in topics if cursors[z] < len(topics[z])])
        n = rng.randint(1, 7)
        reads.append(topics[z][cursors[z] : cursors[z] + n])
        cursors[z] += n
    again = rng.randrange(len(topics["b"]) + 1)
    reads += [topics["b"][i : i + 5] for i in range(again, len(topics["b"]), 5)]

    segments: dict[tuple, list[str]] = {}
    for start in range(0, len(reads), 4):  # four messages a batch
        batch = TagBatch(ex, native=native)
        for events in reads[start : start + 4]:
            if events:
                batch.add(ex.events(encode_messages(events)[0]))
        for key, entries in batch.segments():
            segments.setdefault(key, []).append(entries_text(entries))

    expected: dict = {}
    for row in rows.values():
        idx = f"[{row['code']}]" if type(row["code"]) is int else f'["{row["code"]}"]'
        expected.setdefault(str(row["tenant_id"]), {}).setdefault("orders", set()).add(idx)
    assert _live(segments) == expected


def test_segments_render_as_load_data_text_the_same_in_c_and_python():
    segments = [
        (("tenant", "7", "orders"), {1: 5 << 1, "[22]": 6 << 1 | 1, 2**70: 1 << 1}),  # integer idx keys
        (("tenant", "x\ty\nz\\w", "pairs"), {'["a\\tb",null]': 9 << 1, "[3]": (2**62) << 1}),
        (("tenant", "ünï", "t"), {}),
    ]
    python = render_segments(segments, "app\\1", 41, native=False)
    assert render_segments(segments, "app\\1", 41) == python
    assert python.split(b"\n")[0] == (
        b"tenant\t7\tapp\\\\1\torders\t41\t[1]\\t5\\t0\\n[22]\\t6\\t1\\n[1180591620717411303424]\\t1\\t0"
    )
    with pytest.raises(TypeError):
        render_segments([("bad", {})], "app", 1)


def test_a_tagger_with_no_tag_rules_published_keeps_its_empty_rules(monkeypatch):
    """No tag rules in meta yet (a new environment): the tagger tags nothing and says so
    once per look, never fails its pass (MetaOutage.call gives True for a None result)."""
    from zonesync.meta.store import MetaStore
    from zonesync.tagging.tagger import Tagger

    monkeypatch.setattr(MetaStore, "tags_at", lambda self, version=None: None)
    tagger = Tagger("b", ["a"], connect=None, repo="app", meta=None, partitions=1)
    tagger._read_rules(force=True)
    assert tagger.rules_version == 0 and tagger.rules.mysql == () and tagger.extractor.tables == {}
