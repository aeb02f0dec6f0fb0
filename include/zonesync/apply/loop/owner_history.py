"""Who could have written a row: the rules versions' history, as an applier checks an
event against it (issue 24: forged or foreign events; event_trust.py runs the check).

A zone's topic carries only what that zone's guard let its application write, and a
guard lets a write through only when the rules version it runs says the row's ZSID is
ACTIVE in its zone. So an event on zone Z's topic is believable only if its table is one
the rules declare and Z held the row's ZSID, ACTIVE, in a rules version in force when the
row was written. Anything else was produced by something that is not Z's replicator (or
written in Z behind its guard's back): the applier halts the partition with an alert
naming the event rather than copy the row into every zone.

"When the row was written" is the event's version, a hybrid logical clock in
microseconds (dal/hlc.py) within clock skew of wall time, and a version is in force from
its publication (meta's clock) until the next one's: guards take a new version within a
poll, and one that has not acknowledged yet still runs the version before. The check
therefore accepts every version in force at any time within `skew_s` either side of the
event's version (the applier's clock-skew bound, ZONESYNC_APPLY_MAX_VERSION_AHEAD_S).
This is what lets a zone switch's history through: the old owner's last writes, applied
after the ZSID moved, were made under the version before the block, and a replay of
last week's binlog is judged by last week's rules.

Locating entities: a guard judges a row of a registered entity by the entity's unit, not
by its ZSID's owner (dal/state.py), so an event is believable too when its table declares
an entity column and Z was that entity's unit in a version in force within the same
window (`add_units`: meta's entity_units, every entity change with its version). The
check stays a necessary condition, not all of it: an event that passes by its ZSID is not
asked about an entity registered elsewhere. Not checked: `_zs_origin`, which names the
zone that last wrote the row through a guard, not the zone whose binlog the change is in
(capture/replicator.py publishes by session).

The history is read from meta once per applier pass and once a second, only the versions
published since the last read (each is parsed once). While meta has never answered, the
check is not made (a warning says so): an applier keeps applying through a meta outage
(seed S003-03) and the history it read last stays in force.
"""

from __future__ import annotations

import bisect
import logging

from zonesync.events import ChangeEvent, EventError, decode_row
from zonesync.rules.extract import RuleIndex, ZsidUnknown, zsid_of
from zonesync.rules.model import ACTIVE, RuleSet

log = logging.getLogger("zonesync.applier")


class OwnerHistory:
    """The rules versions in order of publication: [(published at, epoch µs; RuleIndex)]."""

    def __init__(self, skew_s: float, refresh=None):
        self.skew_us = int(skew_s * 1_000_000)
        # reads meta for versions newer than the last, adds them and says whether there
        # were any: an event refused is checked again after it, since the applier reads
        # the history only once a second and a switch's new owner writes at once
        self.refresh = refresh
        self.known = False  # meta answered once
        self.last_version = 0
        self._starts: list[int] = []
        self._indexes: list[RuleIndex] = []
        # the window of the last event: (from, to) of the versions it stays the same for,
        # its distinct versions, and per table the declared specs in them and, per zone, a
        # test of an integer ZSID column value (measured on the applier's loop: 0.5 µs an
        # event this way, 1.2-1.6 µs by the general path, 3.3 µs with nothing cached)
        self._window: tuple[int, int] = (0, -1)
        self._in_window: tuple[RuleIndex, ...] = ()
        self._specs: dict[str, tuple] = {}
        self._fast: dict[tuple[str, str], tuple] = {}  # (table, zone) -> (column, tests of an integer value)
        # each registered entity's units: (le_type, le_id) -> ([from, epoch µs], [zone]), in
        # publication order; the newest entity version added
        self._units: dict[tuple[str, str], tuple[list[int], list[str]]] = {}
        self.last_unit_version = 0

    def add(self, versions: list[tuple[int, float, RuleSet]]) -> None:
        """Versions published after `last_version`, oldest first: (version, epoch s, rules)."""
        self.known = True
        for version, published_s, rules in versions:
            if version <= self.last_version:
                continue
            # meta's clock never runs backwards across versions in the order they were
            # published; if it did, the later version is taken as published no earlier
            start = max(round(published_s * 1_000_000), self._starts[-1] if self._starts else 0)
            last = self._indexes[-1] if self._indexes else None
            # an entities-only change republishes nothing here; rules published again
            # unchanged share their index (a window holding both checks one)
            same = last is not None and last.ruleset.to_doc() == rules.to_doc()
            self._starts.append(start)
            self._indexes.append(last if same else RuleIndex(rules))
            self.last_version = version
        self._window = (0, -1)

    def newest(self) -> RuleSet | None:
        """The newest rules version read (None before meta answered)."""
        return self._indexes[-1].ruleset if self._indexes else None

    def add_units(self, units: list[tuple[int, float, str, str, str]]) -> None:
        """Entity units published after `last_unit_version`, oldest first: (version, epoch s,
        le_type, le_id, zone)."""
        newest = self.last_unit_version
        for version, published_s, le_type, le_id, zone in units:
            if version <= self.last_unit_version:
                continue
            starts, zones = self._units.setdefault((le_type, le_id), ([], []))
            starts.append(max(round(published_s * 1_000_000), starts[-1] if starts else 0))
            zones.append(zone)
            newest = max(newest, version)
        self.last_unit_version = newest

    def entity_held(self, zone: str, entity: tuple[str, str], at_us: int) -> bool:
        """Whether `zone` was `entity`'s unit at some time within the skew either side of
        `at_us` (never, before the entity was first registered: its ZSID decided then)."""
        found = self._units.get(entity)
        if found is None:
            return False
        starts, zones = found
        last = bisect.bisect_right(starts, at_us + self.skew_us)
        if last == 0:
            return False
        first = max(bisect.bisect_right(starts, at_us - self.skew_us) - 1, 0)
        return zone in zones[first:last]

    def in_force(self, at_us: int) -> tuple[RuleIndex, ...]:
        """The distinct versions in force at some time within the skew either side of `at_us`.

        A version from before the first rules version is judged by that first version: a
        row no guard wrote (the table contract's version 0: rows loaded before zonesync
        took the tables over) was the first owner's."""
        lo, hi = self._window
        if lo <= at_us < hi:
            return self._in_window
        starts, skew, inf = self._starts, self.skew_us, float("inf")
        first = max(bisect.bisect_right(starts, at_us - skew) - 1, 0)
        last = max(bisect.bisect_right(starts, at_us + skew), 1)
        # the same versions for every time whose window starts in the same gap between
        # publications and ends in the same one
        lo = max(starts[first] + skew if first > 0 else -inf, starts[last - 1] - skew if last > 1 else -inf)
        hi = min(starts[first + 1] + skew if first + 1 < len(starts) else inf,
                 starts[last] - skew if last < len(starts) else inf)  # fmt: skip
        self._window = (lo, hi)
        self._in_window = tuple(dict.fromkeys(self._indexes[first:last]))
        self._specs, self._fast = {}, {}
        return self._in_window

    def check(self, e: ChangeEvent) -> None:
        """EventError unless `e.table` is declared and `e.source_zone` held the ZSID of each
        of its row images, ACTIVE, in a version in force when it was written.

        The common case costs about a microsecond on the applier's loop: the window of the
        last event still holds, and the table's ZSID column holds an integer that one
        precomputed test per version decides. Anything else takes the general path."""
        if not self.known:
            return
        lo, hi = self._window
        if not lo <= e.version < hi:
            self.in_force(e.version)
        fast = self._fast.get((e.table, e.source_zone))
        if fast is not None:
            column, test = fast
            for image in (e.old, e.new):
                if image is not None:
                    value = image.get(column)
                    if type(value) is not int or not test(value):
                        break
            else:
                return
        try:
            self._check(e)
        except EventError:
            if self.refresh is None or not self.refresh():
                raise
            self._check(e)

    def _check(self, e: ChangeEvent) -> None:
        versions = self.in_force(e.version)
        if not versions:
            raise EventError(f"event LSN {e.lsn} of {e.table}: no rules version was in force at its version "
                             f"{e.version}: no zone could have written it")  # fmt: skip
        specs = self._specs.get(e.table)
        if specs is None:
            specs = self._specs[e.table] = tuple(
                (index, index.ruleset.tables[e.table]) for index in versions if e.table in index.ruleset.tables
            )
        if not specs:
            raise EventError(f"event LSN {e.lsn}: table {e.table!r} is not declared in the rules in force at its "
                             "version: declare it (tables:) before replicating it")  # fmt: skip
        if (e.table, e.source_zone) not in self._fast:
            test = _fast_test(specs, e.source_zone)
            if test is not None:
                self._fast[(e.table, e.source_zone)] = test
        for image in (e.old, e.new):
            if image is not None and not _owned(e.source_zone, specs, image) and not self._unit_of(e, specs, image):
                raise EventError(f"event LSN {e.lsn} of {e.table} {e.pk}: zone {e.source_zone} did not own the "
                                 "row's ZSID, nor was it the unit of the row's entity, in any version in force at "
                                 "its version: only the owner writes a row")  # fmt: skip

    def _unit_of(self, e: ChangeEvent, specs, image: dict) -> bool:
        """Whether `e.source_zone` was the unit of the entity of `image` (by a table spec
        that declares one) when it was written."""
        for _, spec in specs:
            if spec.entity is None or not self._units:
                continue
            value = image.get(spec.entity.column)
            if type(value) is dict:  # a tagged value
                value = decode_row({spec.entity.column: value})[spec.entity.column]
            if value is not None and self.entity_held(e.source_zone, (spec.entity.type, str(value)), e.version):
                return True
        return False


def _owned(zone: str, specs, image: dict) -> bool:
    """Whether `zone` held the ZSID of `image` ACTIVE by one of `specs`' versions."""
    for index, spec in specs:
        if type(image.get(spec.column)) is dict:  # a tagged value (a decimal ZSID column, say)
            image = decode_row(dict(image))
        try:
            rule = index.rule_for(zsid_of(spec, image, index.ruleset.zsid_min))
        except ZsidUnknown:
            continue
        if rule.zone == zone and rule.status == ACTIVE:
            return True
    return False


def _fast_test(specs, zone: str) -> tuple[str, object] | None:
    """(column, test): from an integer value of the table's ZSID column, whether `zone`
    held its ZSID ACTIVE in one of the versions, without building the ZSID and searching
    the rules; None when the versions take the ZSID from different columns, or a function
    has no such test (a map keys by text), or the ZSID space is too wide to list: the
    general path (_owned) decides then. A False from the test is never final: the general
    path (which also reads meta again) decides before anything is refused."""
    columns = {spec.column for _, spec in specs}
    if len(columns) != 1:
        return None
    tests = []
    for index, spec in specs:
        rules = index.ruleset
        if any(r.hi - r.lo >= 1 << 16 for r in rules.rules):
            return None
        owned = {z for r in rules.rules if r.zone == zone and r.status == ACTIVE for z in range(r.lo, r.hi + 1)}
        if spec.function == "modulo":
            buckets, zmin = int(spec.buckets or 1), rules.zsid_min
            flags = bytes(zmin + b in owned for b in range(buckets))
            tests.append(lambda v, flags=flags, buckets=buckets: flags[v % buckets])
        elif spec.function == "range":
            ordered = sorted(spec.ranges)
            if any(a[1] >= b[0] for a, b in zip(ordered, ordered[1:], strict=False)):
                return None  # overlapping ranges: the first listed wins, as zsid_of reads them
            spans = tuple((lo, hi) for lo, hi, zsid in spec.ranges if zsid in owned)
            if len(spans) == 1:
                ((lo, hi),) = spans
                tests.append(lambda v, lo=lo, hi=hi: lo <= v <= hi)
            else:
                tests.append(lambda v, spans=spans: any(lo <= v <= hi for lo, hi in spans))
        else:
            return None
    if len(tests) == 1:
        return columns.pop(), tests[0]
    return columns.pop(), lambda v, tests=tuple(tests): any(t(v) for t in tests)
