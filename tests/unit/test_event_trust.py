"""The applier's checks of each event beyond its types (apply/loop/event_trust.py)."""

from __future__ import annotations

import pytest

from zonesync.apply.loop.event_trust import EventTrust
from zonesync.events import EventError, decode_message

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000_000  # µs


def _event(**fields):
    import json

    doc = {"lsn": 7, "prev_lsn": 6, "source_zone": "a", "origin_zone": 1, "table": "tenants", "pk": {"id": 1},
           "op": "insert", "old": None, "new": {"id": 1}, "version": NOW, "txn_id": "t", "row_index": 0,
           "row_count": 1, "commit_ts": NOW, "partition": 0, **fields}  # fmt: skip
    return decode_message(json.dumps(doc).encode())


def test_an_event_of_its_topics_zone_within_the_bound_passes():
    trust = EventTrust(max_ahead_s=60, now_us=lambda: NOW)
    trust.check(_event(version=NOW + 59_000_000), "a", 0)
    trust.check(_event(version=1), "a", 0)  # old versions are the version rules' business


def test_a_version_past_the_bound_is_refused_naming_it():
    trust = EventTrust(max_ahead_s=60, now_us=lambda: NOW)
    with pytest.raises(EventError, match=r"event LSN 7 of tenants: version \d+ is 61 s ahead .*bound is 60 s"):
        trust.check(_event(version=NOW + 61_000_000), "a", 0)


def test_another_zones_event_on_this_topic_is_refused():
    with pytest.raises(EventError, match="names source zone 'c' but came on zone a's topic"):
        EventTrust(now_us=lambda: NOW).check(_event(source_zone="c"), "a", 0)


def test_an_event_claiming_another_partition_is_refused():
    with pytest.raises(EventError, match="names partition 3 but came on partition 0"):
        EventTrust(now_us=lambda: NOW).check(_event(partition=3), "a", 0)


# -- owners by the rules' history (apply/loop/owner_history.py) ----------------------------

H = 3600_000_000  # an hour, µs


def _rules(a_until: int, status_at_a: str = "ACTIVE", tables=("tenants",)):
    """ZSIDs 0..a_until in zone a (with `status_at_a`), the rest in b; tenants by id % 10."""
    from zonesync.rules import parse

    return parse({
        "zsid_space": {"min": 0, "max": 9},
        "rules": [{"zsids": f"0-{a_until}", "zone": "a", "status": status_at_a},
                  *([{"zsids": f"{a_until + 1}-9", "zone": "b"}] if a_until < 9 else [])],
        "tables": {t: {"column": "id", "function": "modulo", "buckets": 10} for t in tables},
    })  # fmt: skip


def _history(*versions, skew_h=1, refresh=None):
    from zonesync.apply.loop.owner_history import OwnerHistory

    owners = OwnerHistory(skew_h * 3600, refresh)
    owners.add([(i + 1, at / 1e6, rules) for i, (at, rules) in enumerate(versions)])
    return owners


def _row(zsid, version=NOW, op="insert", table="tenants", zone="a"):
    image = {"id": zsid, "name": "x"}
    old, new = (image, None) if op == "delete" else (None, image)
    return _event(op=op, old=old, new=new, pk={"id": zsid}, version=version, table=table, source_zone=zone)[0]


def test_the_owner_of_the_rows_zsid_passes_and_another_zone_is_refused_naming_the_row():
    owners = _history((NOW - 5 * H, _rules(4)))
    owners.check(_row(3))
    owners.check(_row(7, op="delete", zone="b"))
    with pytest.raises(EventError, match=r"LSN 7 of tenants \{'id': 7\}: zone a did not own the row's ZSID"):
        owners.check(_row(7))
    with pytest.raises(EventError, match="zone b did not own"):
        owners.check(_row(13, zone="b"))  # 13 % 10 = 3: a's


def test_a_table_the_rules_do_not_declare_is_refused_by_name():
    owners = _history((NOW - 5 * H, _rules(4)))
    with pytest.raises(EventError, match="table 'secrets' is not declared in the rules in force"):
        owners.check(_row(3, table="secrets"))


def test_a_switch_lets_the_old_owners_late_writes_through_within_the_skew_and_not_after():
    # version 1: ZSIDs 0-4 in a; version 2 (1 h later): 3-4 blocked; version 3 (2 h later): 3-9 in b
    blocked = _rules(4, status_at_a="BLOCK")
    moved = _rules(2)
    owners = _history((NOW - 5 * H, _rules(4)), (NOW - 3 * H, blocked), (NOW - 2 * H, moved), skew_h=1)
    owners.check(_row(3, version=NOW - 3 * H - 1))  # written just before the block: a's
    owners.check(_row(3, version=NOW - 3 * H + H // 2))  # within the skew of the block
    with pytest.raises(EventError, match="zone a did not own"):
        owners.check(_row(3, version=NOW))  # written now, long after the move
    owners.check(_row(3, version=NOW, zone="b"))
    owners.check(_row(3, version=NOW - 6 * H + 1))  # a replay of an old write, judged by its own time


def test_a_version_published_after_the_last_read_is_fetched_before_refusing():
    newer = [(2, (NOW - 1000) / 1e6, _rules(9))]  # a switch gave a ZSIDs 5-9 a moment ago
    calls = []

    def refresh():
        calls.append(1)
        owners.add(newer)
        return bool(newer)

    owners = _history((NOW - 5 * H, _rules(4)), refresh=refresh)
    owners.check(_row(7))
    assert calls == [1]
    newer = []
    with pytest.raises(EventError, match="zone b did not own"):
        owners.check(_row(7, zone="b", version=NOW + 2 * H))
    assert calls == [1, 1]  # asked again, found nothing new, refused


def test_an_update_that_moves_a_row_out_of_its_zones_zsids_needs_both_images_owned():
    owners = _history((NOW - 5 * H, _rules(4)))
    with pytest.raises(EventError, match="zone a did not own"):
        owners.check(_event(op="update", old={"id": 3}, new={"id": 7}, pk={"id": 3})[0])


def test_before_meta_answers_nothing_is_checked_and_before_any_rules_nothing_is_owned():
    from zonesync.apply.loop.owner_history import OwnerHistory

    OwnerHistory(3600).check(_row(7))
    owners = OwnerHistory(3600)
    owners.add([])
    with pytest.raises(EventError, match="no rules version was in force"):
        owners.check(_row(3))


def test_event_trust_runs_the_owners_check():
    trust = EventTrust(now_us=lambda: NOW, owners=_history((NOW - 5 * H, _rules(4))))
    with pytest.raises(EventError, match="zone a did not own"):
        trust.check([_row(7)], "a", 0)


def test_the_cached_window_gives_the_versions_in_force_for_any_order_of_versions():
    """in_force remembers the last window; whatever order events' versions come in, it
    answers as a fresh search over the publication times would."""
    import random

    from zonesync.apply.loop.owner_history import OwnerHistory

    rng = random.Random(7)
    skew = 10
    owners = OwnerHistory(skew / 1e6)
    starts = sorted(rng.sample(range(0, 400), 12))
    owners.add([(i + 1, at / 1e6, _rules(i % 9)) for i, at in enumerate(starts)])

    def expected(at):  # every version whose [start, next start) meets [at - skew, at + skew]
        ends = [*starts[1:], float("inf")]
        found = [i for i, (s, e) in enumerate(zip(starts, ends, strict=True)) if s <= at + skew and e > at - skew]
        return found or [0]

    for at in [rng.randrange(-50, 450) for _ in range(3000)]:
        got = owners.in_force(at)
        want = tuple(dict.fromkeys(owners._indexes[i] for i in expected(at)))
        assert got == want, (at, starts)


def test_the_integer_fast_path_answers_as_the_general_one():
    """check()'s precomputed test per (table, zone) never lets through what the general
    path (the ZSID built and looked up in each version) refuses, and the reverse."""
    import random

    from zonesync.apply.loop import owner_history
    from zonesync.rules import parse

    rng = random.Random(9)
    for _ in range(60):
        cut = rng.randint(0, 8)
        ranges = sorted(rng.sample(range(0, 60), 6))
        doc = {"zsid_space": {"min": 0, "max": 9},
               "rules": [{"zsids": f"0-{cut}", "zone": "a"}, {"zsids": f"{cut + 1}-9", "zone": "b"}],
               "tables": {"m": {"column": "k", "function": "modulo", "buckets": rng.randint(1, 10)},
                          "r": {"column": "k", "function": "range",
                                "ranges": [{"lo": ranges[i], "hi": ranges[i + 1], "zsid": rng.randint(0, 9)}
                                           for i in range(0, 6, 2)]}}}  # fmt: skip
        rules = parse(doc)
        owners = owner_history.OwnerHistory(3600)
        owners.add([(1, (NOW - H) / 1e6, rules)])
        for table in ("m", "r"):
            for zone in ("a", "b"):
                for k in range(-5, 70):
                    event = _event(table=table, source_zone=zone, pk={"k": k}, new={"k": k})[0]
                    specs = ((owners._indexes[0], rules.tables[table]),)
                    general = owner_history._owned(zone, specs, {"k": k})
                    try:
                        owners.check(event)
                        fast = True
                    except EventError:
                        fast = False
                    assert fast == general, (doc, table, zone, k)


def test_a_registered_entitys_unit_owns_its_rows_from_its_registration_within_the_skew():
    """A tenant registered in b (its ZSID a's) is written in b: b's events of its rows pass
    from the registration on (within the skew either side), a's written after its move do
    not; another tenant of a's ZSIDs is still judged by its ZSID."""
    from zonesync.rules import parse

    rules = parse({
        "zsid_space": {"min": 0, "max": 9},
        "rules": [{"zsids": "0-4", "zone": "a"}, {"zsids": "5-9", "zone": "b"}],
        "tables": {"tenants": {"column": "id", "function": "modulo", "buckets": 10,
                               "entity": {"type": "tenant", "column": "id"}}},
    })  # fmt: skip
    owners = _history((NOW - 5 * H, rules), skew_h=1)
    owners.add_units([(2, (NOW - 3 * H) / 1e6, "tenant", "3", "b"), (3, (NOW - 2 * H) / 1e6, "tenant", "13", "a")])
    owners.check(_row(3, version=NOW, zone="b"))  # its unit's
    owners.check(_row(3, version=NOW - 3 * H - H // 2, zone="b"))  # within the skew before its registration
    owners.check(_row(3, version=NOW - 3 * H - H // 2, zone="a"))  # a's before the move: by its ZSID
    with pytest.raises(EventError, match="zone b did not own the row's ZSID, nor was it the unit"):
        owners.check(_row(3, version=NOW - 5 * H, zone="b"))  # long before it was registered in b
    with pytest.raises(EventError, match="zone c did not own"):
        owners.check(_row(3, version=NOW, zone="c"))
    with pytest.raises(EventError, match="zone b did not own"):
        owners.check(_row(23, version=NOW, zone="b"))  # tenant 23: not registered, a's ZSID
    owners.add_units([(2, (NOW - 3 * H) / 1e6, "tenant", "3", "c")])  # a version read before: ignored
    with pytest.raises(EventError, match="zone c did not own"):
        owners.check(_row(3, version=NOW, zone="c"))
    assert owners.last_unit_version == 3
