"""Riding out a meta store outage (seed S003-03, node 对于配置需要有本地 cache).

Replicators and appliers keep moving data while meta is unreachable: what they write
there (checkpoints, lease renewals, lag, resend requests, alerts) can wait, and what
they read from it at start (partition counts) is kept from the last time it answered.
Only guards fail closed after their lease (dal/guard.py). A worker that crashes during
the outage restarts from what was last saved, so it only re-sends or re-reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from zonesync.meta.db import META_DOWN


class MetaOutage:
    """Calls a worker may skip while meta is down: after a failure, each is tried again
    only every `retry` seconds, so a worker cut off from meta does not stall on it."""

    def __init__(self, who: str, log: logging.Logger, retry: float = 1.0, on_failure: Callable | None = None):
        self.who = who
        self.log = log
        self.retry = retry
        self.on_failure = on_failure
        self.retry_at = 0.0  # while meta is unreachable: when to try it again

    @property
    def down(self) -> bool:
        return self.retry_at != 0.0

    def call(self, fn, *args, default=None):
        """`fn(*args)`'s result (True for None), or `default` while meta is down."""
        now = time.monotonic()
        if now < self.retry_at:
            return default
        try:
            result = fn(*args)
        except META_DOWN as exc:
            if not self.down:
                self.log.warning("%s: meta unreachable, going on without it (%s)", self.who, exc)
            self.retry_at = now + self.retry
            if self.on_failure is not None:
                self.on_failure()
            return default
        if self.down:
            self.log.info("%s: meta reachable again", self.who)
            self.retry_at = 0.0
        return True if result is None else result
