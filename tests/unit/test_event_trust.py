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
