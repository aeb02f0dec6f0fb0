"""Change messages -> tag entries, grouped as the tag store keeps them (pure).

A tag entry says: in table T of the repo, the row whose unique-key values are `idx`
belonged to entity (type, id) as of version V, or stopped belonging to it (`deleted`).
The tag store (tag_store.py) keeps each entity's entries together, so a batch's entries
are grouped by (entity type, entity id, table) here, one entry per `idx` per group (the
newest: what the store's fold would keep anyway).

What each change event gives:
- insert: a live entry for the new row's entity;
- update: nothing when the row's unique-key values and entity are unchanged (the entity
  already has its live entry); otherwise a deleted entry in the old entity, for the old
  values, and a live entry in the new (a row moved to another tenant, or re-keyed);
- delete: a deleted entry in the old entity.
Because every move leaves a marker in the entity it leaves, with the move's version, an
entity's own entries are enough to know which of its rows are still its own, whatever
order the zones' topics are read in (tests/unit/test_tag_extract.py replays shuffled
histories): the store needs no index from a row to its entity.

Rows without their unique-key values or their entity (a NULL entity) are counted as
untaggable, never guessed. Unique-key values are written as JSON (`[12]`, `[1,null]`):
rows sharing them (NULLs in a unique key) are one entry, fetched once (S004-10).

Decoding: the tagger reads each message once, with a decoder made for the rules in
force: the fields it needs of each event and, of the row images, only the columns the
rules name (msgspec skips the rest in C, without building them): about 1 µs a row
against 2.8 for the applier's full decode. A message that decoder refuses goes through
the full decoder (events.decode_message), which accepts it or names what is wrong.
"""

from __future__ import annotations

import json
from operator import attrgetter
from typing import Any, Literal

import msgspec

from zonesync.events import DELETE, decode_message
from zonesync.events import _encode as encode_value
from zonesync.tagging.rules import TagRules

try:  # the inserts' loop in C (zonesync/_tagging.c), when built (make setup builds it)
    from zonesync import _tagging
except ImportError:  # pragma: no cover - the pure-Python loop gives the same entries
    _tagging = None

MAX_IDX, MAX_ENTITY_ID = 512, 128  # longer values are untaggable (never cut short)
_UNSET = msgspec.UNSET


def idx_text(values: list) -> str:
    """Unique-key values as the store keeps them: JSON, `[12]` for the common one integer."""
    if len(values) == 1 and type(values[0]) is int:
        return f"[{values[0]}]"
    return json.dumps(values, separators=(",", ":"), sort_keys=True, default=str)


def row_tag(values: list, entity) -> tuple[str, str] | None:
    """(idx, entity id) of a row read from its table (the backfill's), exactly as the tagger
    makes them from the row's change events (whose values are encoded as events.encode_row
    does); None when the row has no entity or its values are longer than the store keeps."""
    values = [encode_value(v) for v in values]
    entity = encode_value(entity)
    if entity is None:
        return None
    idx = idx_of(values[0]) if len(values) == 1 and type(values[0]) is int else idx_text(values)
    entity = entity if type(entity) is str else str(entity)
    if len(idx) > MAX_IDX or len(entity) > MAX_ENTITY_ID:
        return None
    return idx, entity


def _rows_present(events: list) -> bool:
    return all(e.new is not None or e.op == DELETE for e in events)


def idx_of(key) -> str:
    """A batch's idx key as stored: an integer key is one integer's idx."""
    return f"[{key}]" if type(key) is int else key


class Extractor:
    """The decoder and the grouping for one repo under one version of the tag rules."""

    def __init__(self, rules: TagRules, repo: str):
        by_table = rules.by_table(repo)
        columns = sorted({c for r in by_table.values() for c in (*r.index_keys, r.entity_field)})
        attr = {c: f"c{i}" for i, c in enumerate(columns)}  # column names need not be identifiers
        image = msgspec.defstruct("TagImage", [(attr[c], Any, _UNSET) for c in columns],
                                  rename={attr[c]: c for c in columns}, gc=False)  # fmt: skip
        event = msgspec.defstruct("TagEvent", [
            ("lsn", int), ("table", str), ("op", Literal["insert", "update", "delete"]),
            ("old", image | None), ("new", image | None), ("version", int),
        ], gc=False)  # fmt: skip
        self._event, self._decode = event, msgspec.json.Decoder(list[event]).decode
        # table -> (entity type, the image's unique-key values and entity as one tuple, whether
        # the unique key has several columns, the image's attributes of the first key and the entity)
        self.tables = {t: (r.entity_type, attrgetter(*(attr[k] for k in r.index_keys), attr[r.entity_field]),
                           len(r.index_keys) > 1, attr[r.index_keys[0]], attr[r.entity_field])
                       for t, r in by_table.items()}  # fmt: skip

    def events(self, raw: bytes) -> list:
        """A message's events, as far as tagging needs them; EventError names a bad one."""
        if type(raw) is bytes and raw[:1] == b"[":
            try:
                events = self._decode(raw)
                if events and (_rows_present(events) if _tagging is None else _tagging.rows_present(events)):
                    return events
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
                pass
        full = decode_message(raw)  # raises EventError naming the fault
        return [msgspec.convert({"lsn": e.lsn, "table": e.table, "op": e.op, "old": e.old, "new": e.new,
                                 "version": e.version}, self._event) for e in full]  # fmt: skip


class TagBatch:
    """The entries of a batch of events, newest per idx (on a tie the later event), and the
    events it could not tag.

    Kept as table -> entity (the image's value) -> idx -> version * 2 + deleted, an idx of
    one integer as that integer (`[12]` once rendered): a batch holds tens of thousands of
    entries, and plain ints and strings cost the collector nothing where tuples per entry
    made it walk them all at every collection."""

    def __init__(self, extractor: Extractor, native: bool = True):
        self.tables = {t: (values_of, multi, entity_type, {})
                       for t, (entity_type, values_of, multi, *_) in extractor.tables.items()}  # fmt: skip
        # the same dicts, as _tagging.tag_inserts takes them (None: the Python loop alone)
        self.native = {t: (key, entity, self.tables[t][3], multi)
                       for t, (_, _, multi, key, entity) in extractor.tables.items()} if native else None  # fmt: skip
        self.untaggable = 0
        self.entries = 0
        self.events = 0

    def add(self, events: list) -> None:
        """The entries of `events` (in their order) added to the batch's."""
        self.events += len(events)
        if _tagging is None or self.native is None:
            self._add(events)
            return
        i, n = 0, len(events)
        while i < n:  # C takes the inserts it covers, this loop the event it stops at
            i, added = _tagging.tag_inserts(events, i, self.native)
            self.entries += added
            if i < n:
                self._add(events[i : i + 1])
                i += 1

    def _add(self, events) -> None:
        tables = self.tables
        for e in events:
            spec = tables.get(e.table)
            if spec is None:
                continue
            values_of, multi, _, by_entity = spec
            new = values_of(e.new) if e.op != DELETE else None
            old = values_of(e.old) if e.old is not None else None
            if new == old:  # an update that changes neither unique key nor entity (or nothing taggable)
                if new is None or not _taggable(new):
                    self.untaggable += e.op != DELETE
                continue
            if new is not None and old is not None and new[:-1] == old[:-1] and str(new[-1]) == str(old[-1]):
                continue  # the entity's type changed, not its id (7 -> '7'): the same tag
            packed = e.version << 1
            if old is not None:
                self._put(by_entity, old, multi, packed | 1)
            if new is None:
                continue
            self.untaggable += not self._put(by_entity, new, multi, packed)

    def _put(self, by_entity: dict, values: tuple, multi: bool, packed: int) -> bool:
        """One entry, any shape of key and entity; False when the image lacks them (or they
        are longer than the store keeps)."""
        entity = values[-1]
        if entity is None or _UNSET in values:
            return False
        if multi:
            idx = idx_text(list(values[:-1]))
        else:
            value = values[0]
            idx = value if type(value) is int else idx_text([value])
        if type(entity) not in (int, str):
            entity = str(entity)
        if (type(idx) is str and len(idx) > MAX_IDX) or (type(entity) is str and len(entity) > MAX_ENTITY_ID):
            return False
        group = by_entity.get(entity)
        if group is None:
            by_entity[entity] = group = {}
        seen = group.get(idx)
        if seen is None:
            self.entries += 1
            group[idx] = packed
        elif seen <= packed | 1:  # not newer than this change
            group[idx] = packed
        return True

    def segments(self) -> list[tuple[tuple[str, str, str], dict[str, int]]]:
        """((entity type, entity id, table), {idx: version * 2 + deleted}) per segment; an
        entity met as the number 7 and as the text '7' is one segment."""
        out = []
        for table, (_, _, entity_type, by_entity) in self.tables.items():
            texts: dict[str, dict[str, int]] = {}
            for entity, group in by_entity.items():
                eid = entity if type(entity) is str else str(entity)
                seen = texts.get(eid)
                if seen is None:
                    texts[eid] = group
                else:  # merged, the newer of each idx (of equal versions, either: both are this batch's)
                    for idx, packed in group.items():
                        if seen.get(idx, -1) >> 1 <= packed >> 1:
                            seen[idx] = packed
            out += [((entity_type, eid, table), group) for eid, group in texts.items()]
        return out

    @property
    def groups(self) -> dict[tuple[str, str, str], dict[str, tuple[int, int]]]:
        """(entity type, entity id, table) -> {idx: (version, deleted)}: the segments, readable."""
        return {key: {idx_of(idx): (p >> 1, p & 1) for idx, p in group.items()} for key, group in self.segments()}


def _taggable(values: tuple) -> bool:
    return values[-1] is not None and _UNSET not in values
