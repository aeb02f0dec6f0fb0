"""The decoder trusts nothing (issue 24): whatever bytes arrive as a message, it either
returns events whose every field has its type, or raises EventError (the applier halts
that partition with it); never another exception, never an event that fails later."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zonesync.events import ChangeEvent, EventError, decode_message
from zonesync.sql_names import is_ident

pytestmark = pytest.mark.unit

GOOD = {"lsn": 5, "prev_lsn": 4, "source_zone": "a", "origin_zone": 1, "table": "tenants",
        "pk": {"tenant_id": 1}, "op": "update", "old": {"tenant_id": 1, "name": "x"},
        "new": {"tenant_id": 1, "name": "y"}, "version": 3, "txn_id": "t1", "row_index": 0, "row_count": 1,
        "commit_ts": 1700000000000000, "partition": 0}  # fmt: skip
TYPES = {"lsn": int, "prev_lsn": int, "source_zone": str, "origin_zone": int, "table": str, "pk": dict,
         "version": int, "txn_id": str, "row_index": int, "row_count": int, "commit_ts": int, "partition": int,
         "is_retry": bool, "txn_end": bool}  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _well_typed(event: ChangeEvent) -> None:
    for field, kind in TYPES.items():
        assert type(getattr(event, field)) is kind, (field, getattr(event, field))
    assert event.op in ("insert", "update", "delete")
    assert is_ident(event.table) and event.pk
    assert (event.new is None) == (event.op == "delete") or event.op != "insert"
    for image in (event.old, event.new):
        assert image is None or type(image) is dict


def _decoded_or_named(raw: bytes) -> None:
    try:
        events = decode_message(raw)
    except EventError:
        return
    assert events
    for e in events:
        _well_typed(e)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(field=st.sampled_from(sorted(GOOD)), value=json_values, batch=st.booleans())
def test_any_field_replaced_by_any_json_value(field, value, batch):
    doc = {**GOOD, field: value}
    raw = json.dumps([GOOD, doc] if batch else doc).encode()
    _decoded_or_named(raw)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(st.sampled_from([*GOOD, "is_retry", "txn_end", "x"]), json_values, max_size=18))
def test_any_document_of_the_events_fields(doc):
    _decoded_or_named(json.dumps(doc).encode())


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200))
def test_any_bytes(raw):
    _decoded_or_named(raw)


@pytest.mark.parametrize(
    "field, value, words",
    [("pk", [1], "pk must be an object"), ("table", 5, "table must be a string"),
     ("table", "t`; DROP TABLE x", "not a plain table name"), ("pk", {}, "pk is empty"),
     ("old", "x", "old must be an object or null"), ("txn_id", 7, "txn_id must be a string")],
)  # fmt: skip
def test_the_poison_cases_of_the_issue_are_named(field, value, words):
    for raw in (json.dumps({**GOOD, field: value}).encode(), json.dumps([GOOD, {**GOOD, field: value}]).encode()):
        with pytest.raises(EventError, match=words):
            decode_message(raw)
