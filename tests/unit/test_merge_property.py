"""S003-19: merging a batch per primary key (合并算法执行后，单 pk 主键只有一条记录), then deciding
each net change, ends exactly where deciding and applying the events one by one ends.

A pure model of the target: rows by (table, pk), tombstone versions, locked keys. Each
decide() answer is applied the way write_plan.py writes it: upsert writes the change's
new image, delete removes the row and keeps a tombstone at the change's version (never
moved back), tombstone only keeps one, lock locks the key, skip writes nothing. WAIT
(decide.py, when it has it) stops the source partition before the event: that event and
every later one of the partition are not applied in this batch; the writer then applies
the batch serially (one by one), so a key whose merged change waits is not compared.

The events are one source's (zone a, origin 1) for a few keys, each key's row evolving at
the source: inserts while it is absent, updates and deletes while it exists, versions
increasing. Between two published events the source may apply another zone's write (the
loop filter keeps it out of a's stream) or have the row changed behind its back: the next
update's or delete's old image is then not the previous event's new image (an
inconsistent chain). The target starts at the chain's start, absent, tombstoned, at a
later or intermediate version, changed behind the applier's back, or as another entity's
row, locked or not.

Properties: at most one net change per (table, pk), carrying every event of its key; the
merged batch ends in the same rows, tombstones and locks as the events one by one; a key
whose merged change does not wait never waits one by one. A target inside the change (it
already has some of its versions: see "a target inside a merged change") is judged from
there, as one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.events import change_event
from zonesync.apply.batch import decide as decide_module
from zonesync.apply.batch.decide import DELETE_ROW, LOCK, SKIP, TOMBSTONE, UPSERT, decide
from zonesync.apply.batch.merge import merge
from zonesync.events import DELETE, INSERT, UPDATE, ChangeEvent

pytestmark = pytest.mark.unit

WAIT = getattr(decide_module, "WAIT", None)  # decide.py's newest kind (S000-48): the test works without it too

# (table, id, source partition): two keys share partition 0, the same id lives in two tables
KEYS = (("t", 1, 0), ("t", 2, 1), ("u", 1, 0))
SOURCE = 1  # zone a's _zs_origin
NAMES = st.sampled_from("xyz")
OTHER_ZONES = st.sampled_from((2, 3))


def image(pk: int, name: str, origin: int, version: int) -> dict:
    return {"id": pk, "name": name, "_zs_origin": origin, "_zs_version": version}


# -- the model of the target -----------------------------------------------------------------


@dataclass
class Target:
    rows: dict = field(default_factory=dict)  # (table, pk_text) -> encoded row
    tombstones: dict = field(default_factory=dict)  # (table, pk_text) -> version
    locked: set = field(default_factory=set)
    copying: bool = False  # the table is in copy mode (decide.py, "Copy mode")

    def copy(self) -> Target:
        return Target(dict(self.rows), dict(self.tombstones), set(self.locked), self.copying)

    def decide(self, change):
        key = (change.table, change.pk_text)
        return decide(change, self.rows.get(key), self.tombstones.get(key), key in self.locked, self.copying)

    def apply(self, change, kind: str) -> None:
        key = (change.table, change.pk_text)
        if kind == UPSERT:
            self.rows[key] = change.new
        elif kind in (DELETE_ROW, TOMBSTONE):
            if kind == DELETE_ROW:
                del self.rows[key]
            self.tombstones[key] = max(self.tombstones.get(key, change.version), change.version)
        elif kind == LOCK:
            self.locked.add(key)
        else:
            assert kind == SKIP, f"unknown action {kind!r}"

    def of(self, key) -> tuple:
        """What the key's state is, as far as any later decision can tell: a tombstone at or below
        the live row's version is never read (decide() reads it only when the row is gone, and
        the delete that removes the row raises it above the row's version): one by one, a
        delete + insert leaves one, the merged change (an upsert) does not."""
        row, tombstone = self.rows.get(key), self.tombstones.get(key)
        if row is not None and tombstone is not None and tombstone <= row["_zs_version"]:
            tombstone = None
        return row, tombstone, key in self.locked


def apply_merged(target: Target, events: list[ChangeEvent]) -> tuple[Target, dict]:
    """The writer's way: one net change per key, each decided against the target as read."""
    state, kinds = target.copy(), {}
    for change in merge(events):
        kind = state.decide(change).kind
        kinds[(change.table, change.pk_text)] = kind
        if kind != WAIT:
            state.apply(change, kind)
    return state, kinds


def apply_one_by_one(target: Target, events: list[ChangeEvent]) -> tuple[Target, set]:
    """Every event alone, in order; WAIT stops its partition there. Returns the keys that waited."""
    state, stopped, waited = target.copy(), set(), set()
    for e in events:
        if e.partition in stopped:
            continue
        (change,) = merge([e])
        kind = state.decide(change).kind
        if kind == WAIT:
            stopped.add(e.partition)
            waited.add(e.key())
            continue
        state.apply(change, kind)
    return state, waited


# -- random batches -----------------------------------------------------------------------------


@st.composite
def row_history(draw, pk: int):
    """(the source row before the batch or None, the published steps (op, old, new, version),
    every image the row had, the highest version seen)."""
    top = draw(st.integers(1, 3))
    row = image(pk, draw(NAMES), draw(st.sampled_from((1, 2, 3))), top) if draw(st.booleans()) else None
    start, images, steps = row, [row] if row else [], []
    for _ in range(draw(st.integers(1, 5))):
        if row is not None and draw(st.integers(0, 3)) == 0:
            if draw(st.booleans()):  # another zone's write, applied at the source: not in its stream
                row = image(pk, draw(NAMES), draw(OTHER_ZONES), top + draw(st.integers(1, 3)))
            else:  # changed behind the source's back, same version
                row = {**row, "name": row["name"] + "*"}
            images.append(row)
            top = row["_zs_version"]
        if row is None:
            new = image(pk, draw(NAMES), SOURCE, top + draw(st.integers(1, 3)))
            steps.append((INSERT, None, new, new["_zs_version"]))
            row, top = new, new["_zs_version"]
            images.append(row)
        elif draw(st.integers(0, 3)) == 0:
            top += draw(st.integers(1, 2))
            steps.append((DELETE, row, None, top))
            row = None
        else:
            new = image(pk, draw(NAMES), SOURCE, top + draw(st.integers(1, 3)))
            steps.append((UPDATE, row, new, new["_zs_version"]))
            row, top = new, new["_zs_version"]
            images.append(row)
    return start, steps, images, top


@st.composite
def target_row(draw, pk: int, start, images, top):
    """(row or None, tombstone version or None, locked)."""
    kind = draw(st.sampled_from(("start", "absent", "tombstoned", "newer", "image", "tampered", "other")))
    row = None
    if kind == "start":
        row = start
    elif kind == "newer":
        row = image(pk, draw(NAMES), draw(st.sampled_from((1, 2, 3))), top + draw(st.integers(1, 3)))
    elif kind == "image" and images:
        row = draw(st.sampled_from(images))
    elif kind == "tampered" and images:
        row = {**draw(st.sampled_from(images)), "name": "changed behind the applier's back"}
    elif kind == "other":
        row = image(pk, draw(NAMES), draw(st.sampled_from((1, 2, 3))), draw(st.integers(0, top + 1)))
    tombstone = draw(st.integers(0, top + 1)) if kind == "tombstoned" else draw(st.none() | st.integers(0, top + 1))
    if row is not None and tombstone is not None:
        # a row present over a newer tombstone is no state the target reaches: the applier inserts
        # only above the tombstone, and a guard's insert outranks it
        tombstone = min(tombstone, row["_zs_version"])
    return row, tombstone, draw(st.integers(0, 4)) == 0


@st.composite
def batches(draw):
    """(the target before the batch, the batch: events of several keys interleaved)."""
    target, per_key = Target(), {}
    for table, pk, partition in KEYS:
        start, steps, images, top = draw(row_history(pk))
        row, tombstone, locked = draw(target_row(pk, start, images, top))
        key = (table, f"[{pk}]")
        if row is not None:
            target.rows[key] = row
        if tombstone is not None:
            target.tombstones[key] = tombstone
        if locked:
            target.locked.add(key)
        per_key[(table, pk, partition)] = steps
    order = draw(st.permutations([k for k, steps in per_key.items() for _ in steps]))
    events, last_lsn = [], {}
    for table, pk, partition in order:
        op, old, new, version = per_key[(table, pk, partition)].pop(0)
        lsn = last_lsn.get(partition, 0) + 10
        events.append(
            change_event(
                lsn=lsn,
                prev_lsn=last_lsn.get(partition, 0),
                op=op,
                table=table,
                pk={"id": pk},
                version=version,
                old=old,
                new=new,
                partition=partition,
            )
        )
        last_lsn[partition] = lsn
    return target, events


# -- a target inside a merged change --------------------------------------------------------------
# decide() judges a merged change from its first event (its first old row, or an insert's
# lineage) and against its last version. One by one, the events the target already has
# (at or below its row's version, or its tombstone's when the row is gone) are skipped and
# the rest is judged from the first event above it. The two differ when the target sits
# inside the change (decide.py's `_inside` now judges from there; each case has an example below):
#   replayed in part: an update or delete chain meets a target row at one of its later
#     versions (a replay past a lost position): merged, the first old row is not the target:
#     a false lock where one by one skips what the target has and lands the rest;
#   deleted in between: the target's tombstone is at or above the change's first event and
#     below its last: merged, an insert chain lands (the row comes back over another zone's
#     delete, silently) and a delete + insert chain locks, where one by one does the opposite;
#   re-insert as new as the target: a change with an insert after its first event at exactly
#     the target row's version, the target another row (another origin): merged, the version
#     guard skips it; one by one the insert meets another entity's row and locks (S004-36).


def _stamp(row: dict) -> tuple:
    return row["_zs_origin"], row["_zs_version"]


def _events(change) -> list[ChangeEvent]:
    return [change.first_event, *(change.later or ())]


def replayed_in_part(change, row, tombstone) -> bool:
    events = _events(change)
    return row is not None and events[0].op != INSERT and events[0].version <= row["_zs_version"] < change.version


def deleted_in_between(change, row, tombstone) -> bool:
    return row is None and tombstone is not None and _events(change)[0].version <= tombstone < change.version


def reinserted_as_new_as_the_target(change, row, tombstone) -> bool:
    return row is not None and any(
        e.op == INSERT and e.version == row["_zs_version"] and _stamp(e.new) != _stamp(row) for e in _events(change)[1:]
    )


def key_events(*steps, pk=1, table="t") -> list[ChangeEvent]:
    """One key's events in one partition, in order: (op, old, new[, version])."""
    out = []
    for n, (op, old, new, *version) in enumerate(steps, 1):
        v = version[0] if version else (new or old)["_zs_version"]
        out.append(
            change_event(
                lsn=10 * n, prev_lsn=10 * (n - 1), op=op, table=table, pk={"id": pk}, version=v, old=old, new=new
            )
        )
    return out


def r(version: int, name: str = "x", origin: int = SOURCE) -> dict:
    return image(1, name, origin, version)


# (the gap, the events, the target row, its tombstone)
DECIDE_GAPS = {
    replayed_in_part: (key_events((UPDATE, r(1), r(2)), (UPDATE, r(2), r(3, "y"))), r(2), None),
    deleted_in_between: (key_events((INSERT, None, r(2)), (UPDATE, r(2), r(4, "y"))), None, 3),
    reinserted_as_new_as_the_target: (key_events((DELETE, r(3), None, 4), (INSERT, None, r(5))), r(5, "o", 2), None),
}


def one_key_outcome(events, row, tombstone, locked=False) -> tuple:
    """(merged decision, merged state, one-by-one state, whether one by one waited) of one key."""
    key = events[0].key()
    target = Target(
        {key: row} if row else {}, {key: tombstone} if tombstone is not None else {}, {key} if locked else set()
    )
    merged, kinds = apply_merged(target, events)
    serial, waited = apply_one_by_one(target, events)
    return kinds[key], merged.of(key), serial.of(key), bool(waited)


# -- the properties -----------------------------------------------------------------------------


def check(target: Target, events: list[ChangeEvent]) -> None:
    changes = merge(events)
    keys = [(c.table, c.pk_text) for c in changes]
    assert len(keys) == len(set(keys)), "more than one net change for a key"
    assert set(keys) == {e.key() for e in events}
    for c in changes:
        own = [e for e in events if e.key() == (c.table, c.pk_text)]
        assert (c.events, c.version) == (len(own), own[-1].version), "the net change carries every event of its key"
        assert _events(c) == own[-len(_events(c)) :], "its events are the key's last ones, in order"

    merged, kinds = apply_merged(target, events)
    serial, waited = apply_one_by_one(target, events)
    partition_of = {e.key(): e.partition for e in events}
    # a merged WAIT sends the batch to the serial retry: nothing of that partition is compared
    waiting = {partition_of[k] for k, kind in kinds.items() if kind == WAIT}
    compared = [k for k in keys if partition_of[k] not in waiting]
    assert not [k for k in waited if k in compared], f"one by one waits where the merged change does not: {kinds}"
    for c in changes:
        key = (c.table, c.pk_text)
        if key not in compared:
            continue
        got, want = merged.of(key), serial.of(key)
        if WAIT is None and want[2] and got[2]:
            # Without WAIT, a gap in the chain locks: one by one the events before it land first,
            # merged they are held with the lock. Which rows are locked must agree.
            continue
        assert got == want, f"{key}: merged ({kinds[key]}) {got} != one by one {want}"


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(batches())
def test_merged_batches_end_where_the_events_one_by_one_end(batch):
    check(*batch)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(batches())
def test_in_copy_mode_merged_batches_end_where_one_by_one_ends_at_the_newest_version(batch):
    """Copy mode (seed 000, Incremental Copy): whatever the target holds (the copy's rows, older,
    newer, other values, absent), merged and one by one agree, nothing waits and nothing new is
    locked; every key not locked ends at its last event's state when that is newer than the
    target's row (or tombstone), and keeps the target's otherwise."""
    target, events = batch
    target.copying = True
    merged, kinds = apply_merged(target, events)
    serial, waited = apply_one_by_one(target, events)
    assert not waited and not {WAIT, LOCK} & set(kinds.values()), kinds
    for change in merge(events):
        key = (change.table, change.pk_text)
        assert merged.of(key) == serial.of(key), f"{key}: merged ({kinds[key]}) {merged.of(key)} != {serial.of(key)}"
        row, tombstone, locked = target.of(key)
        assert merged.of(key)[2] == locked, "no lock taken or dropped"
        mark = row["_zs_version"] if row is not None else tombstone
        if locked or (mark is not None and mark >= change.version):
            assert merged.rows.get(key) == target.rows.get(key), "an older change never lands"
        elif change.new is not None:
            assert merged.rows[key] == change.new, "the newest change lands as its full row"
        else:
            assert key not in merged.rows and merged.tombstones[key] == change.version, "the delete lands"


# -- examples -----------------------------------------------------------------------------------
# An inconsistent chain (an update or delete whose old row is not the previous event's new
# row): merge.py used to merge it from the first old row to the last new one, so a target
# at the chain's start took the last row (or lost it) in one go, where one by one the first
# event lands and the second waits for the missing write (or locks). Found by the property.
INCONSISTENT_CHAINS = {
    "update, then an update over another zone's write": key_events(
        (UPDATE, r(1), r(2)), (UPDATE, r(5, "z", 2), r(6, "y"))
    ),
    "update, then a delete of a row changed behind the source's back": key_events(
        (UPDATE, r(1), r(2)), (DELETE, r(2, "x*"), None, 3)
    ),
    "insert, then an update over another zone's write": key_events((INSERT, None, r(1)), (UPDATE, r(3, "z", 2), r(4))),
}


@pytest.mark.parametrize("events", INCONSISTENT_CHAINS.values(), ids=INCONSISTENT_CHAINS.keys())
def test_an_inconsistent_chain_is_decided_from_its_gap(events):
    """S003-19: the net change restarts at the gap: its old row is the gap's, its first event
    the gap's event (the one a lock records); every event still counts."""
    (change,) = merge(events)
    assert (change.first_event, change.old, change.events) == (events[-1], events[-1].old, len(events))
    start = events[0].old  # the target as the chain found it (absent before an insert)
    kind, merged, serial, waited = one_key_outcome(events, start, None)
    if WAIT is not None:
        # the target is behind the gap's old row: merged, the change waits, and the writer applies
        # the batch one by one, which lands the events before the gap and stops (or locks) at it
        assert kind == WAIT, "merged, it waits for the missing write"
        assert waited or serial[2], "one by one stops at the gap too"
        assert serial[0] == events[0].new, "one by one the events before the gap land"
    else:
        assert kind == LOCK, "merged, it locks, as one by one does"
        assert merged == (start, None, True), "the target keeps its row, the change held with the lock"
        assert serial[2], "one by one locks too (after landing the events before the gap)"


@pytest.mark.parametrize("events", INCONSISTENT_CHAINS.values(), ids=INCONSISTENT_CHAINS.keys())
def test_a_target_that_already_has_the_gaps_old_row_takes_the_rest(events):
    """The missing write reached the target first (from its own zone): the events before the
    gap are older than it and skipped, the rest lands, as one by one."""
    kind, merged, serial, waited = one_key_outcome(events, events[-1].old, None)
    assert kind in (UPSERT, DELETE_ROW) and not waited
    assert merged == serial and merged[0] == events[-1].new


@pytest.mark.parametrize("gap", list(DECIDE_GAPS), ids=[gap.__name__ for gap in DECIDE_GAPS])
def test_decide_judges_a_merged_change_from_what_the_target_has(gap):
    """A target inside the merged change (see above): the merged change and the events one by
    one agree (decide.py judges from the first event above the target: `_inside`)."""
    events, row, tombstone = DECIDE_GAPS[gap]
    assert gap(merge(events)[0], row, tombstone)
    kind, merged, serial, _ = one_key_outcome(events, row, tombstone)
    assert merged == serial, f"merged ({kind}) {merged} != one by one {serial}"


def test_after_a_version_is_the_rest_of_the_change():
    """NetChange.after: what the events one by one still change in a target at that version
    (for decide.py, above)."""
    events = key_events((UPDATE, r(1), r(2)), (DELETE, r(2), None, 3), (INSERT, None, r(5)), (UPDATE, r(5), r(6, "y")))
    (change,) = merge(events)
    rest = change.after(2)
    assert (rest.first_op, rest.old, rest.new, rest.version, rest.events) == (DELETE, r(2), r(6, "y"), 6, 3)
    assert change.after(5).first_event is events[-1]
    assert change.after(0).events == 4 and change.after(6) is None
