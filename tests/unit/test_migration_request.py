"""A migration request's checks that need no meta: bad fields refused in one line."""

from __future__ import annotations

import re

import pytest

from zonesync.migrate.request import MigrationRefused, MigrationRequest, parse_les

pytestmark = pytest.mark.unit

ZONES = {"a": 1, "b": 2}


def test_named_locating_entities_are_parsed_and_checked():
    assert parse_les(["chat:70", "tenant:7"]) == (("chat", "70"), ("tenant", "7"))
    assert parse_les(None) == () and parse_les([]) == ()
    assert parse_les(["chat:a:b"]) == (("chat", "a:b"),)  # (an id may hold a colon)
    MigrationRequest("tenant", "7", "b", "plan1", "why", (("chat", "70"),)).check(ZONES)
    for bad, words in [(["chat"], "les: 'chat' is not TYPE:ID (e.g. chat:70)"), ([":70"], "les: ':70' is not"),
                       (["chat:"], "les: 'chat:' is not")]:  # fmt: skip
        with pytest.raises(MigrationRefused, match=re.escape(words)):
            parse_les(bad)
    for les, words in [((("chat room", "70"),), "les: locating entity type 'chat room' must be a plain name"),
                       ((("chat", "70"), ("chat", "70")), "les: a locating entity is named twice")]:  # fmt: skip
        with pytest.raises(MigrationRefused, match=words):
            MigrationRequest("tenant", "7", "b", "plan1", "why", les).check(ZONES)
