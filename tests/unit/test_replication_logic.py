"""Pure parts of replication: LSNs, the event codec, merging, the apply decision, continuity."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.events import change_event
from tests.support.kafka import FakeMessage
from zonesync.apply.batch.decide import DELETE_ROW, LOCK, SKIP, TOMBSTONE, UPSERT, WAIT, decide
from zonesync.apply.batch.merge import merge
from zonesync.apply.loop.continuity import complete_prefix, filter_chain
from zonesync.events import (
    MAX_MESSAGE_BYTES,
    ChangeEvent,
    EventError,
    decode_message,
    decode_row,
    encode_message,
    encode_messages,
    encode_row,
    file_number,
    make_lsn,
    split_lsn,
)

pytestmark = pytest.mark.unit


def ev(lsn, prev, op, old=None, new=None, version=None, pk=1):
    image = new if new is not None else old
    return change_event(
        lsn=lsn,
        prev_lsn=prev,
        op=op,
        table="t",
        pk={"id": pk},
        old=old,
        new=new,
        version=version if version is not None else image["_zs_version"],
    )


def row(v, name="n", pk=1):
    return {"id": pk, "name": name, "_zs_origin": 1, "_zs_version": v}


def test_lsn_is_deterministic_ordered_and_decodable():
    a, b, c = make_lsn(1, 500, 0), make_lsn(1, 500, 1), make_lsn(2, 4, 0)
    assert a < b < c
    assert split_lsn(b) == (1, 500, 1) and split_lsn(c) == (2, 4, 0)
    assert make_lsn(1, 500, 1) == b
    assert file_number("binlog.000042") == 42
    with pytest.raises(EventError):
        make_lsn(1, 2**32, 0)
    with pytest.raises(EventError):
        file_number("binlog")


def test_codec_round_trips_mysql_types():
    values = {
        "d": decimal.Decimal("12.50"),
        "t": dt.datetime(2026, 1, 2, 3, 4, 5, 6),
        "day": dt.date(2026, 1, 2),
        "b": b"\x00\xff",
        "i": 7,
        "s": "x",
        "n": None,
        "td": dt.timedelta(hours=1, seconds=2),
    }
    assert decode_row(encode_row(values)) == values
    e = ev(5, 0, "insert", new=encode_row(row(3)))
    assert ChangeEvent.from_json(e.to_json()) == e


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"{not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"lsn": 1}', "lacks field"),
        (None, "message value of NoneType"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON|not a JSON object"),
    ],
)
def test_malformed_events_are_named(raw, words):
    """Named, as EventError: the applier halts the partition with it instead of retrying."""
    with pytest.raises(EventError, match=words):
        ChangeEvent.from_json(raw)


def test_malformed_fields_are_named():
    good = ev(5, 0, "insert", new=row(3)).to_json().decode()
    with pytest.raises(EventError, match="op 'upsert'"):
        ChangeEvent.from_json(good.replace('"op":"insert"', '"op":"upsert"').encode())
    with pytest.raises(EventError, match="lsn must be an integer"):
        ChangeEvent.from_json(good.replace('"lsn":5', '"lsn":"5"').encode())
    with pytest.raises(EventError, match="without a new row"):
        ChangeEvent.from_json(
            good.replace('"new":{', '"nothing":{').replace('"old":null', '"new":null,"old":null').encode()
        )


def test_event_documents_tolerate_extra_fields_and_reject_booleans():
    e = ev(5, 0, "insert", new=row(3))
    doc = json.loads(e.to_json())
    del doc["is_retry"]
    doc["added_by_a_newer_replicator"] = 1  # as many fields as ours, one of them unknown
    assert ChangeEvent.from_json(json.dumps(doc).encode()) == e
    doc["lsn"] = True
    with pytest.raises(EventError, match="lsn must be an integer"):
        ChangeEvent.from_json(json.dumps(doc).encode())
    with pytest.raises(EventError, match="not JSON"):
        ChangeEvent.from_json(b'{"lsn": "\xff"}')


def test_fast_and_checked_decoding_agree():
    """from_json decodes in C and falls back to the Python checks for anything the typed
    decoder refuses: both paths must accept the same documents with the same result."""
    good = ev(5, 0, "update", old=row(3, "é"), new=row(4, "ü\u2603")).to_json()
    assert json.loads(good) == json.loads(json.dumps(json.loads(good), separators=(",", ":")))
    variants = {
        "as written": good,
        "ascii escapes": json.dumps(json.loads(good)).encode(),
        "origin as text": good.replace(b'"origin_zone":1', b'"origin_zone":"1"'),
        "pk as list": good.replace(b'"pk":{"id":1}', b'"pk":[1]'),
        "nan in a row": good.replace(b'"name":"\xc3\xa9"', b'"name":NaN'),
        "insert with an old row": good.replace(b'"op":"update"', b'"op":"insert"'),
        "delete with a new row": good.replace(b'"op":"update"', b'"op":"delete"'),
        "upsert": good.replace(b'"op":"update"', b'"op":"upsert"'),
        "update without old": good.replace(b'"old":{', b'"gone":{').replace(b'"new":', b'"old":null,"new":'),
        "version as bool": good.replace(b'"version":4', b'"version":true'),
        "bad UTF-8 in an unknown field": good.replace(b'"lsn":5', b'"lsn":5,"x":"\xff"'),
        "bad UTF-8 in an unknown key": good.replace(b'"lsn":5', b'"lsn":5,"\xed\xa0\x80":1'),
        "nested too deeply": good.replace(b'"lsn":5', b'"lsn":5,"x":' + b"[" * 100_000 + b"]" * 100_000),
        "missing fields": b'{"lsn":5}',
    }
    for name, raw in variants.items():
        assert raw != good or name == "as written", f"{name}: the replacement did not apply"
        try:
            checked = ChangeEvent._checked(raw)
        except EventError as exc:
            with pytest.raises(EventError, match=re.escape(str(exc)[:20])):
                ChangeEvent.from_json(raw)
            continue
        fast = ChangeEvent.from_json(raw)
        assert fast == checked, name
        assert type(fast.origin_zone) is type(checked.origin_zone), name


def test_a_message_carries_a_partitions_events_in_order():
    events = [
        ev(5, 0, "insert", new=row(1)),
        ev(6, 5, "update", old=row(1), new=row(2, "é")),
        ev(7, 6, "delete", old=row(2, "é"), version=3),
    ]
    raw = encode_message(events)
    assert raw.startswith(b"[") and json.loads(raw)[1]["lsn"] == 6
    assert decode_message(raw) == events
    # a lone event document (replicators before batching wrote one per message)
    assert decode_message(events[0].to_json()) == events[:1]


def test_wide_rows_are_split_across_messages_below_the_size_limit():
    wide = [ev(i, i - 1, "insert", new={**row(i), "blob": "x" * 300_000}) for i in range(1, 8)]
    payloads = encode_messages(wide)
    assert len(payloads) > 1 and all(len(p) <= MAX_MESSAGE_BYTES for p in payloads)
    assert [e for p in payloads for e in decode_message(p)] == wide, "every event once, in order"
    assert encode_messages(wide[:2]) == [encode_message(wide[:2])], "small enough: one message"
    huge = [ev(1, 0, "insert", new={**row(1), "blob": "x" * (MAX_MESSAGE_BYTES + 1)})]
    assert encode_messages(huge) == [encode_message(huge)], "one event is never split"


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda raw: b"[]", "non-empty JSON array"),
        (lambda raw: b"[1]", "event 0 of the message: event is not a JSON object"),
        (lambda raw: raw.replace(b'"op":"update"', b'"op":"upsert"'), "event 1 of the message: op 'upsert'"),
        (lambda raw: raw.replace(b'"lsn":7', b'"lsn":"7"'), "event 2 of the message: lsn must be an integer"),
        (lambda raw: raw[:-5], "not JSON"),
        (lambda raw: raw.replace(b'"lsn":5', b'"lsn":5,"x":"\xff"'), "not JSON"),
        (lambda raw: None, "message value of NoneType"),
    ],
)
def test_malformed_messages_are_named(mutate, words):
    events = [
        ev(5, 0, "insert", new=row(1)),
        ev(6, 5, "update", old=row(1), new=row(2)),
        ev(7, 6, "delete", old=row(2), version=3),
    ]
    raw = mutate(encode_message(events))
    with pytest.raises(EventError, match=words):
        decode_message(raw)


def test_a_message_decodes_as_its_events_do_one_by_one():
    """The typed decoder reads a whole message; whatever it refuses goes through the
    checks event by event: both must give what decoding each event alone gives."""
    good = [ev(5, 0, "update", old=row(3, "é"), new=row(4, "ü\u2603")), ev(6, 5, "insert", new=row(9, pk=2), pk=2)]
    variants = {
        "as written": lambda d: d,
        "origin as text": lambda d: d.replace(b'"origin_zone":1', b'"origin_zone":"1"'),
        "insert with an old row": lambda d: d.replace(b'"op":"update"', b'"op":"insert"'),
        "extra field": lambda d: d.replace(b'"lsn":6', b'"lsn":6,"added":1'),
    }
    for name, change in variants.items():
        docs = [change(e.to_json()) for e in good]
        try:
            one_by_one = [ChangeEvent.from_json(d) for d in docs]
        except EventError as exc:  # refused alone (an origin as text): refused in a message too
            with pytest.raises(EventError, match=re.escape(str(exc))):
                decode_message(b"[" + b",".join(docs) + b"]")
            continue
        batch = decode_message(b"[" + b",".join(docs) + b"]")
        assert batch == one_by_one, name
        assert [type(e.origin_zone) for e in batch] == [type(e.origin_zone) for e in one_by_one], name


def test_merge_per_key():
    e1 = ev(1, 0, "insert", new=row(1))
    e2 = ev(2, 1, "update", old=row(1), new=row(2, "x"))
    e3 = ev(3, 2, "delete", old=row(2, "x"), version=3)
    other = ev(4, 3, "insert", new=row(9, pk=2), pk=2)
    (m1, m2) = merge([e1, e2, e3, other])
    assert (m1.first_op, m1.last_op, m1.old, m1.new, m1.version, m1.events) == ("insert", "delete", None, None, 3, 3)
    assert (m2.first_op, m2.new["_zs_version"]) == ("insert", 9)
    (u,) = merge([ev(2, 1, "update", old=row(1), new=row(2)), ev(3, 2, "update", old=row(2), new=row(5))])
    assert (u.old["_zs_version"], u.new["_zs_version"], u.version) == (1, 5, 5)


def one(*events):
    return merge(list(events))[0]


def net(change):
    return (change.first_op, change.last_op, change.old, change.new, change.version, change.events)


def test_every_merge_rule_keeps_what_the_decision_needs():
    """S003-11, S003-13, S003-15 to S003-18: the net change of each pair of events on a key."""
    # insert + update -> insert of the updated row, at the update's version
    assert net(one(ev(1, 0, "insert", new=row(1)), ev(2, 1, "update", old=row(1), new=row(2, "x")))) == (
        "insert", "update", None, row(2, "x"), 2, 2,
    )  # fmt: skip
    # update + insert (a copy's row after an increment) -> the newer row, no old row to check
    assert net(one(ev(1, 0, "update", old=row(1), new=row(2)), ev(2, 1, "insert", new=row(3, "copy")))) == (
        "insert", "insert", None, row(3, "copy"), 3, 2,
    )  # fmt: skip
    # update + delete -> delete checked against the update's old row
    assert net(one(ev(1, 0, "update", old=row(1), new=row(2)), ev(2, 1, "delete", old=row(2), version=3))) == (
        "update", "delete", row(1), None, 3, 2,
    )  # fmt: skip
    # delete + insert -> from the deleted row to the new one (the deleted row is checked)
    assert net(one(ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "insert", new=row(3)))) == (
        "delete", "insert", row(1), row(3), 3, 2,
    )  # fmt: skip
    # delete + update (a copy's row after a delete) -> the newer row, version-guarded
    assert net(one(ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "update", old=row(7), new=row(8)))) == (
        "insert", "update", None, row(8), 8, 2,
    )  # fmt: skip
    # delete + delete -> delete at the newer version
    assert net(one(ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "delete", old=row(4), version=5))) == (
        "delete", "delete", row(1), None, 5, 2,
    )  # fmt: skip


@pytest.mark.parametrize(
    "events, target, tomb, expect",
    [
        # S003-13 update + insert: lands when newer, whatever the target row; skipped when not newer
        ((ev(1, 0, "update", old=row(1), new=row(2)), ev(2, 1, "insert", new=row(3))), row(1, "other"), None, UPSERT),
        ((ev(1, 0, "update", old=row(1), new=row(2)), ev(2, 1, "insert", new=row(3))), row(4), None, SKIP),
        # S003-15 update + delete: the update's old row must be the target's, or the row locks
        ((ev(1, 0, "update", old=row(1), new=row(2)), ev(2, 1, "delete", old=row(2), version=3)), row(1), None,
         DELETE_ROW),
        ((ev(1, 0, "update", old=row(1), new=row(2)), ev(2, 1, "delete", old=row(2), version=3)), row(1, "x"), None,
         LOCK),
        # S003-16 delete + insert on an existing key: the new row, unless the deleted row is not the target's
        ((ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "insert", new=row(3))), row(1), None, UPSERT),
        ((ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "insert", new=row(3))), row(1, "x"), None, LOCK),
        # S003-17 delete + update: version-guarded, no old-row check
        ((ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "update", old=row(7), new=row(8))), row(1, "x"), None,
         UPSERT),
        ((ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "update", old=row(7), new=row(8))), None, 9, SKIP),
        # S003-18 delete + delete: the first delete's row goes (its tombstone at the newer version, net
        # above); skipped when a tombstone is already newer
        ((ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "delete", old=row(4), version=5)), row(1), None,
         DELETE_ROW),
        ((ev(1, 0, "delete", old=row(1), version=2), ev(2, 1, "delete", old=row(4), version=5)), None, 6, SKIP),
    ],
)  # fmt: skip
def test_merged_changes_are_decided_by_their_rules(events, target, tomb, expect):
    assert decide(one(*events), target, tomb, False).kind == expect


@pytest.mark.parametrize(
    "change, target, tomb, locked, expect",
    [
        (one(ev(1, 0, "insert", new=row(5))), None, None, False, UPSERT),
        (one(ev(1, 0, "insert", new=row(5))), row(5), None, False, SKIP),  # replay
        (one(ev(1, 0, "insert", new=row(5))), row(7), None, False, SKIP),  # target newer
        (one(ev(1, 0, "insert", new=row(5))), None, 6, False, SKIP),  # no resurrection
        (one(ev(1, 0, "insert", new=row(8))), None, 6, False, UPSERT),  # newer than the tombstone
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), row(5), None, False, UPSERT),
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), row(5, "changed"), None, False, LOCK),
        # S000-48: the target behind the old row (a version from another source not yet arrived): wait
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), row(4), None, False, WAIT),
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), None, None, False, WAIT),  # its insert not yet
        (one(ev(1, 0, "delete", old=row(5), version=6)), row(4, "other"), None, False, WAIT),
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), None, 4, False, WAIT),  # re-inserted after 4
        # ... but a row changed behind the applier's back is locked at once: at the old row's version
        # (an unguarded write), or past it (a guarded one), or deleted at or after the old row's version
        (one(ev(1, 0, "update", old=row(5), new=row(8, "x"))), row(6, "other"), None, False, LOCK),
        (one(ev(1, 0, "update", old=row(5), new=row(8, "x"))), None, 5, False, LOCK),
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), None, 9, False, SKIP),  # deleted later
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), row(5), None, True, SKIP),  # locked row
        (one(ev(1, 0, "delete", old=row(5), version=6)), row(5), None, False, DELETE_ROW),
        (one(ev(1, 0, "delete", old=row(5), version=6)), None, 6, False, SKIP),  # replayed delete
        # S000-65 / S000-62: a replayed update or delete the target already has (its old row no
        # longer matches): skipped by version, never a false lock
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), row(6, "x"), None, False, SKIP),
        (one(ev(1, 0, "update", old=row(5), new=row(6, "x"))), row(9, "later"), None, False, SKIP),
        (one(ev(1, 0, "delete", old=row(5), version=6)), row(8, "reinserted"), None, False, SKIP),
        (one(ev(1, 0, "insert", new=row(5)), ev(2, 1, "delete", old=row(5), version=6)), None, None, False, TOMBSTONE),
    ],
)
def test_decide(change, target, tomb, locked, expect):
    assert decide(change, target, tomb, locked).kind == expect


def stamped(origin, v, name="n", pk=1):
    return {"id": pk, "name": name, "_zs_origin": origin, "_zs_version": v}


_INSERT = ev(1, 0, "insert", new=stamped(1, 10))
_UPDATED = ev(2, 1, "update", old=stamped(1, 10), new=stamped(1, 20, "u"))
_UPDATED_AGAIN = ev(3, 2, "update", old=stamped(1, 20, "u"), new=stamped(1, 30, "w"))


@pytest.mark.parametrize(
    "events, target, tomb, expect",
    [
        # S004-36 (a): another entity's row with the key, older than the insert: locked, never overwritten
        ((_INSERT,), stamped(2, 5, "other"), None, LOCK),
        ((_INSERT,), stamped(1, 5, "other"), None, LOCK),  # same origin, older: a different row all the same
        ((_INSERT,), stamped(3, 10, "other"), None, LOCK),  # as new as the insert, another origin
        ((_INSERT, _UPDATED), stamped(2, 5, "other"), None, LOCK),  # merged with its update: the same
        ((_INSERT, ev(2, 1, "delete", old=stamped(1, 10), version=11)), stamped(2, 5), None, LOCK),
        # (b) a replayed insert: the target has this row (origin and version): skipped, no lock
        ((_INSERT,), stamped(1, 10), None, SKIP),
        ((_INSERT, _UPDATED), stamped(1, 20, "u"), None, SKIP),
        # (c) the target has a later version of the row: skipped (so is a newer unrelated row: see decide.py)
        ((_INSERT,), stamped(1, 20, "u"), None, SKIP),
        ((_INSERT,), stamped(2, 25, "moved to b, updated there"), None, SKIP),
        ((_INSERT, _UPDATED), stamped(1, 30, "w"), None, SKIP),
        # the replay's rest is new to the target: it lands from the version the target has
        ((_INSERT, _UPDATED), stamped(1, 10), None, UPSERT),
        ((_INSERT, _UPDATED, _UPDATED_AGAIN), stamped(1, 20, "u"), None, UPSERT),
        ((_INSERT, ev(2, 1, "delete", old=stamped(1, 10), version=11)), stamped(1, 10), None, DELETE_ROW),
        # ... unless the target was changed behind the applier at that version, or is no version of it
        ((_INSERT, _UPDATED), stamped(1, 10, "tampered"), None, LOCK),
        ((_INSERT, _UPDATED, _UPDATED_AGAIN), stamped(2, 25, "other"), None, LOCK),
        # an update's old image that is another zone's write the source had applied: still this row
        ((_INSERT, ev(2, 1, "update", old=stamped(2, 15, "b"), new=stamped(1, 20))), stamped(2, 15, "b"), None,
         UPSERT),
        # (d) delete, then insert again: the key is free (a tombstone older than the insert), or the
        # merged delete + insert is checked by the deleted row
        ((ev(3, 2, "insert", new=stamped(1, 40)),), None, 31, UPSERT),
        ((ev(3, 2, "insert", new=stamped(1, 40)),), None, 41, SKIP),
        ((ev(2, 1, "delete", old=stamped(1, 30), version=31), ev(3, 2, "insert", new=stamped(1, 40))),
         stamped(1, 30), None, UPSERT),
        ((ev(2, 1, "delete", old=stamped(1, 30), version=31), ev(3, 2, "insert", new=stamped(1, 40))),
         stamped(2, 30, "other"), None, LOCK),
        # a copy's row after an update (no creation: the first event is an update): version only
        ((ev(1, 0, "update", old=stamped(1, 10), new=stamped(1, 20)), ev(2, 1, "insert", new=stamped(1, 30))),
         stamped(2, 5, "other"), None, UPSERT),
    ],
)  # fmt: skip
def test_an_insert_meeting_a_row_is_an_update_only_of_its_own_row(events, target, tomb, expect):
    """S004-36: decide.py, "Inserts meeting a row"."""
    action = decide(one(*events), target, tomb, False)
    assert action.kind == expect, action.reason
    if expect == LOCK and events[0].op == "insert" and target.get("name") != "tampered":
        assert "insert meets another row with this key" in action.reason


def test_continuity_skips_duplicates_accepts_successors_and_stops_at_gaps():
    e = [ev(10, 0, "insert", new=row(1)), ev(20, 10, "insert", new=row(1)), ev(30, 20, "insert", new=row(1))]
    chain = [(x, i) for i, x in enumerate(e)]
    assert [x.lsn for x, _ in filter_chain(0, chain).accepted] == [10, 20, 30]
    dup = filter_chain(0, [chain[0], chain[0], chain[1]])
    assert [x.lsn for x, _ in dup.accepted] == [10, 20] and dup.skipped == 1 and dup.gap is None
    lost = filter_chain(0, [chain[0], chain[2]])
    assert [x.lsn for x, _ in lost.accepted] == [10] and lost.gap == (10, 20)
    swapped = filter_chain(10, [chain[2], chain[1]])
    assert [x.lsn for x, _ in swapped.accepted] == [20] and swapped.gap == (10, 20)
    retry = ev(30, 20, "insert", new=row(1))
    retry.is_retry = True
    assert filter_chain(10, [(retry, 0)]).gap == (10, 20), "a retry does not skip the continuity check"


def _on(event, partition: int):
    """The event as carried in `partition` (the applier refuses one naming another)."""
    import msgspec

    return msgspec.structs.replace(event, partition=partition)


def test_a_round_takes_whole_messages_up_to_its_budget_and_leaves_the_rest():
    from zonesync.apply.loop.applier import Applier
    from zonesync.apply.loop.continuity import PartitionState

    applier = Applier("b", ["a"], writer_factory=None, meta=None, partitions=2, bootstrap=lambda: "unused")
    applier.book.state = {("a", 0): PartitionState(applied_lsn=0), ("a", 1): PartitionState(applied_lsn=0)}
    lsn = iter(range(1, 10**6))
    msgs = [
        FakeMessage(n % 2, n, encode_message([_on(ev(next(lsn), 0, "insert", new=row(1)), n % 2) for _ in range(500)]))
        for n in range(5)
    ]
    chains: dict = {}
    taken, delivered, rest = applier._take(msgs, chains, None, budget=1200)
    assert (taken, delivered, rest) == (1500, True, msgs[3:]), "past the budget by one message at most"
    assert [len(chains[("a", p)]) for p in (0, 1)] == [1000, 500]
    assert {offset for _, offset in chains[("a", 1)]} == {1}, "each event keeps its message's offset"
    assert applier.book.per_message[("a", 0)] == 500


class _Writer:
    """Stands in for ZoneWriter: records what it commits; fails the batch holding `fail_lsn`."""

    def __init__(self, committed: list, fail_lsn: int):
        from zonesync.apply.batch.resident import ResidentGate
        from zonesync.apply.batch.table_holds import TableHolds

        self.committed, self.fail_lsn = committed, fail_lsn
        self.resident = ResidentGate()  # (the applier hands it the rules' resident tables)
        self.holds = TableHolds()  # (and the zone's held tables)

    def apply_many(self, changes, positions):
        from zonesync.apply.batch.batch_result import BatchResult

        lsns = [e.lsn for _, events in changes for e in events]
        if self.fail_lsn in lsns:
            time.sleep(0.2)  # the loop hands out the next round meanwhile
            raise RuntimeError("target gone")
        self.committed.append(lsns)
        return BatchResult(applied=len(lsns))


def _pipelined_applier(committed, fail_lsn):
    from zonesync.apply.loop.applier import Applier
    from zonesync.apply.loop.continuity import PartitionState
    from zonesync.apply.loop.settings import ApplierSettings

    applier = Applier(
        "b",
        ["a"],
        writer_factory=lambda: _Writer(committed, fail_lsn),
        meta=None,
        partitions=2,
        bootstrap=lambda: "unused",
        settings=ApplierSettings(workers=2, small_round=0, rounds_in_flight=3),
    )
    applier.book.state = {("a", p): PartitionState(applied_lsn=0) for p in (0, 1)}
    return applier


def _round(lsn: int, prev: int, offset: int, partition: int = 0) -> dict:
    return {partition: [(("a", partition), [(ev(lsn, prev, "insert", new=row(lsn)), offset)])]}


def test_rounds_overlap_and_commit_in_order_per_worker():
    committed: list = []
    applier = _pipelined_applier(committed, fail_lsn=-1)
    lanes = [ThreadPoolExecutor(max_workers=1) for _ in range(2)]
    in_flight, failed = deque(), threading.Event()
    for n, lsn in enumerate((1, 2, 3, 4)):
        applier.rounds.run(lanes, in_flight, failed, _round(lsn, lsn - 1, 100 + n))
        assert applier.book.state[("a", 0)].applied_lsn == lsn, "the next round's chain follows this one"
    applier.rounds.reap(in_flight, keep=0)
    assert committed == [[1], [2], [3], [4]]
    assert applier.book.offsets[("a", 0)] == 103


def test_a_stalled_target_holds_the_loop_at_the_rounds_in_flight_bound():
    """S003-06: with the target stalled, at most rounds_in_flight rounds are handed out;
    the loop waits (consuming nothing more) instead of buffering rounds without bound."""
    committed: list = []
    gate = threading.Event()
    applier = _pipelined_applier(committed, fail_lsn=-1)  # rounds_in_flight=3
    applier.writer_factory = lambda: _GatedWriter(committed, gate)
    lanes = [ThreadPoolExecutor(max_workers=1) for _ in range(2)]
    in_flight, failed = deque(), threading.Event()
    handed = []

    def loop():
        for n, lsn in enumerate((1, 2, 3, 4, 5)):
            applier.rounds.run(lanes, in_flight, failed, _round(lsn, lsn - 1, 100 + n))
            handed.append(lsn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(0.3)
    assert handed == [1, 2, 3], "a fourth round waits for the first to commit"
    assert committed == []
    gate.set()
    thread.join(5)
    applier.rounds.reap(in_flight, keep=0)
    for lane in lanes:
        lane.shutdown(wait=True)
    assert handed == [1, 2, 3, 4, 5] and committed == [[1], [2], [3], [4], [5]]


class _GatedWriter(_Writer):
    def __init__(self, committed: list, gate: threading.Event):
        super().__init__(committed, fail_lsn=-1)
        self.gate = gate

    def apply_many(self, changes, positions):
        assert self.gate.wait(10), "the test never opened the gate"
        return super().apply_many(changes, positions)


def test_a_failed_round_stops_every_later_round_of_its_worker():
    """Round 2 is handed out while round 1 is still being applied; round 1 fails: round 2
    must not commit (its position would pass rows that were rolled back)."""
    committed: list = []
    applier = _pipelined_applier(committed, fail_lsn=1)
    lanes = [ThreadPoolExecutor(max_workers=1) for _ in range(2)]
    in_flight, failed = deque(), threading.Event()
    applier.rounds.run(lanes, in_flight, failed, _round(1, 0, 100))
    applier.rounds.run(lanes, in_flight, failed, _round(2, 1, 101))
    applier.rounds.run(lanes, in_flight, failed, _round(7, 0, 200, partition=1))  # the other worker
    with pytest.raises(RuntimeError, match="target gone"):
        applier.rounds.reap(in_flight, keep=0)
    for lane in lanes:
        lane.shutdown(wait=True)
    assert [2] not in committed, "a later round of the failed worker committed"
    assert ("a", 0) not in applier.book.offsets, "nothing of partition 0 counts as committed"


def test_complete_prefix_keeps_a_transaction_until_its_last_row_in_the_partition():
    """S002-02: the chain is cut after the last event that ends its transaction there."""

    def e(lsn, txn, end=False):
        event = change_event(lsn=lsn, op="insert", table="t", pk={"id": lsn}, version=1, new={"id": lsn}, txn_id=txn)
        event.txn_end = end
        return (event, lsn // 10)

    whole = [e(10, "t1"), e(20, "t1", True), e(30, "t2", True)]
    assert complete_prefix(whole) == (whole, [])
    open_tail = [e(10, "t1"), e(20, "t1", True), e(30, "t2"), e(40, "t2")]
    assert complete_prefix(open_tail) == (open_tail[:2], open_tail[2:])
    assert complete_prefix(open_tail[2:]) == ([], open_tail[2:]), "nothing of an open transaction"
    # an event followed by another transaction's ended its own (a replicator without txn_end)
    unmarked = [e(10, "t1"), e(20, "t1"), e(30, "t2")]
    assert complete_prefix(unmarked) == (unmarked[:2], unmarked[2:])


def test_the_resident_tables_are_known_once_meta_answered_even_with_no_rules(monkeypatch):
    """Step 7: meta unreachable since the start: not known (a pass applies nothing); meta
    answering "no rules published" (MetaOutage.call says True): known, none resident (it
    crashed the pass once: True was indexed as a (version, rules) pair); rules: theirs."""
    from zonesync.apply.loop.applier import Applier
    from zonesync.apply.loop.settings import ApplierSettings
    from zonesync.meta.db import MetaError
    from zonesync.meta.store import MetaStore
    from zonesync.rules import parse

    applier = Applier(
        "b",
        ["a"],
        writer_factory=None,
        meta=None,
        partitions=2,
        bootstrap=lambda: "unused",
        settings=ApplierSettings(check_owners=False),
    )  # (with the owners' check: theirs, known once read)
    answers = iter([MetaError("down"), None])

    def rules_at(self, version=None):
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(MetaStore, "rules_at", rules_at)
    assert applier._read_resident() is False and applier.resident == {}
    applier.meta_outage.retry_at = 0.0  # (no wait for the next try)
    assert applier._read_resident() is True and applier.resident == {}
    doc = {"zsid_space": {"min": 0, "max": 9}, "rules": [{"zsids": "0-9", "zone": "a"}],
           "tables": {"notes": {"column": "t", "function": "modulo", "buckets": 10, "resident": True,
                                "entity": {"type": "tenant", "column": "t"}}}}  # fmt: skip
    monkeypatch.setattr(MetaStore, "rules_at", lambda self, version=None: (3, parse(doc, "test")))
    assert applier._read_resident() is True and applier.resident == {"notes": ("tenant", "t", False)}
    monkeypatch.setattr(MetaStore, "rules_at", rules_at)  # down again: the last ones read stay
    answers = iter([MetaError("down")])
    assert applier._read_resident() is True and applier.resident == {"notes": ("tenant", "t", False)}
