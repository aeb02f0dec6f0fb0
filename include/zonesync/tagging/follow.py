"""What a tagging worker (the row tagger, the KV tagger) shares: the tag rules in force,
followed from meta, and its alerts, both going on while meta is down."""

from __future__ import annotations

import logging
import time

from zonesync.meta import alerts
from zonesync.meta.db import MetaConfig
from zonesync.meta.outage import MetaOutage
from zonesync.meta.store import MetaStore

POLL_S = 1.0  # the tag rules read again at most this often


class RulesFollower:
    def __init__(self, meta: MetaConfig, zone: str, who: str, log: logging.Logger):
        self.meta, self.zone, self.who, self.log = meta, zone, who, log
        self.outage = MetaOutage(who, log)
        self.version = 0  # the version last returned by newer()
        self._read_at = 0.0

    def newer(self, force: bool = False):
        """(version, TagRules) when the tag rules in force are a version other than the one
        last returned, else None (also while meta is down: the worker keeps what it has).
        Reads meta at most every POLL_S unless `force`."""
        now = time.monotonic()
        if not force and now - self._read_at < POLL_S:
            return None
        self._read_at = now
        found = self.outage.call(MetaStore(self.meta).tags_at, default=False)
        if found is False or found is True:  # meta down / no tag rules yet (None -> True)
            return None
        if found[0] == self.version:
            return None
        self.version = found[0]
        self.log.info("%s: tag rules version %s (%d tables, %d KV patterns)", self.who, found[0],
                      len(found[1].mysql), len(found[1].kv))  # fmt: skip
        return found

    def alert(self, kind: str, detail: dict) -> None:
        """Logged, and recorded in meta when it is reachable."""
        self.log.error("%s: %s %s", self.who, kind, detail)
        self.outage.call(alerts.record, self.meta, self.zone, kind, detail, default=False)
