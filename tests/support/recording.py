"""Recording what appliers commit, per key, for per-key-order tests: a writer wrapper that
tells a Recorder what each apply_many committed, and from which thread."""

from __future__ import annotations

import threading
from collections import defaultdict


class Recorder:
    """Per target zone: each key's values (`value_of(event)`) its writers committed, in
    commit order, its partition, and the lanes (worker threads) that applied each key per
    applier run; events the loop applied itself (a small round) are counted in
    `loop_events`."""

    def __init__(self, zone: str, value_of):
        self.zone = zone
        self.value_of = value_of
        self.lock = threading.Lock()
        self.values: dict[int, list[int]] = defaultdict(list)
        self.partition: dict[int, int] = {}
        self.lanes: dict[tuple[int, int], set[int]] = defaultdict(set)  # (run, key) -> lanes
        self.loop_events = 0

    def wrap(self, factory, run: int):
        """A writer factory whose writers record into this Recorder."""
        return lambda: RecordingWriter(factory(), self, run)

    def record(self, changes, run: int) -> None:
        thread = threading.current_thread().name
        prefix = f"apply-{self.zone}-"
        lane = int(thread[len(prefix) :].split("_")[0]) if thread.startswith(prefix) else None
        with self.lock:
            for _, events in changes:
                for e in events:
                    key = e.pk["tenant_id"]
                    self.values[key].append(self.value_of(e))
                    self.partition[key] = e.partition
                    if lane is None:
                        self.loop_events += 1
                    else:
                        self.lanes[(run, key)].add(lane)


class RecordingWriter:
    """A ZoneWriter that records what it committed (once apply_many returned); every other
    attribute, read or set, is the writer's (the applier hands its writers shared state)."""

    def __init__(self, inner, recorder: Recorder, run: int):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_recorder", recorder)
        object.__setattr__(self, "_run", run)

    def apply_many(self, changes, positions, *args, **kwargs):
        result = self._inner.apply_many(changes, positions, *args, **kwargs)
        self._recorder.record(changes, self._run)
        return result

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)
