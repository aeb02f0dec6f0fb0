"""Row versions that strictly increase even when clocks disagree.

`_zs_version` is a hybrid logical clock in microseconds: max(last + 1, now_us)
in this process, and the guard's UPDATE writes GREATEST(_zs_version + 1, that)
so a row's version grows by at least one per write whichever zone wrote it last
and however far behind this zone's clock is. Versions stay close to wall time,
which makes them readable in an incident.
"""

from __future__ import annotations

import threading
import time


class HybridClock:
    def __init__(self, now_us=lambda: time.time_ns() // 1000):
        self._now_us = now_us
        self._last = 0
        self._lock = threading.Lock()

    def tick(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, self._now_us())
            return self._last

    def observe(self, version: int) -> None:
        """Never hand out a version at or below one already seen."""
        with self._lock:
            self._last = max(self._last, version)
