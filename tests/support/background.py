"""A test's helper thread (a load, a watcher) as a context manager."""

from __future__ import annotations

import threading
import time


class Background:
    """Started on enter; on exit told to stop (`self._stop`) and joined. Subclasses run
    `_run()` until `self._stop` is set."""

    name = "background"

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        raise NotImplementedError


def wait_until(predicate, timeout: float, what: str, must: bool = True, step: float = 0.05):
    """Wait until `predicate()` is true and return what it returned; at the timeout fail
    naming `what` (or, not `must`, return False)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            assert not must, f"timed out after {timeout} s waiting until {what}"
            return False
        time.sleep(step)
    return value
