"""What the replicator cannot fix by starting its pass over, and reports instead.

Each fault here would otherwise turn into a restart loop that publishes nothing and
tells nobody: the replicator raises one alert per cause (`zonesync alerts`), keeps
its checkpoint where it is, and asks again every few seconds, so that the fix (a file
restored, a limit raised, a clashing reader stopped) is picked up without a restart.
"""

from __future__ import annotations

import logging

import msgspec

from zonesync.meta import alerts
from zonesync.meta.db import MetaConfig

log = logging.getLogger("zonesync.replicator")
RETRY_SECONDS = 5.0
# ER_MASTER_FATAL_ERROR_READING_BINLOG: the server cannot send the binlog from the requested
# position (the file was purged or expired, or the position does not exist)
BINLOG_UNREADABLE = 1236
# ER_SLAVE_SAME_ID: another reader connected with this reader's server_id, and the server
# dropped this one for it (MariaDB keeps the newest connection of a server_id)
SERVER_ID_TAKEN = 4052


class CaptureFault(RuntimeError):
    kind = "capture_fault"

    def __init__(self, message: str, key: str, detail: dict):
        super().__init__(message)
        self.key = key
        self.detail = detail


class EventTooLarge(CaptureFault):
    """One event is larger than the broker takes (seed case S002-12, a huge LOB). It is
    never truncated and never skipped: nothing is published past it until the limits
    (the producer's and the broker's message.max.bytes) let it through."""

    kind = "event_too_large"

    def __init__(self, payload: bytes):
        doc = msgspec.json.decode(payload)[0]
        detail = {"lsn": doc["lsn"], "table": doc["table"], "pk": doc["pk"], "bytes": len(payload)}
        super().__init__(
            f"an event of {len(payload)} bytes is over the broker's message limit: {detail}", str(doc["lsn"]), detail
        )


class ServerIdClash(CaptureFault):
    """Another binlog reader of this zone uses the replicator's server_id (seed S003-01).
    MariaDB keeps only the newest connection of a server_id, so connecting anyway would
    silently cut the other reader off (a native replica, another tool), and moving to
    another id would hide the misconfiguration. The replicator does neither: it reads
    nothing until the other reader is gone or the ids are fixed."""

    kind = "server_id_clash"

    def __init__(self, server_id: int, other: str):
        super().__init__(
            f"server_id {server_id} is in use by another binlog reader ({other}): give this replicator another "
            "--server-id, or stop the other reader",
            f"{server_id}:{other}",
            {"server_id": server_id, "other_reader": other, "action": "zonesync replicate --server-id N (unused)"},
        )


class PrimaryChanged(CaptureFault):
    """The server at the zone's primary address is not the one capture was reading (seed
    S001-10, S003-38: a virtual IP moved to the promoted replica, a host rebuilt). Its
    binlog positions mean nothing for the checkpoint, so nothing is read there until the
    checkpoint is mapped onto it by GTID (`zonesync zones set-primary`, failover.py)."""

    kind = "primary_changed"

    def __init__(self, zone: str, address: str, found: int, expected: int):
        super().__init__(
            f"the server at {address} is server_id {found}, not {expected} that zone {zone}'s capture was reading: "
            f"map the checkpoint onto it with `zonesync zones set-primary {zone} {address}`",
            f"{address}:{found}",
            {"address": address, "server_id": found, "capture_was_reading": expected,
             "action": f"zonesync zones set-primary {zone} {address} (docs/failover.md)"},
        )  # fmt: skip


class FaultReporter:
    """One alert per (kind, key) for the process's life; meta being down only delays it."""

    def __init__(self, meta: MetaConfig, zone: str):
        self.meta = meta
        self.zone = zone
        self._raised: set[tuple[str, str]] = set()

    def once(self, kind: str, key: str, detail: dict) -> None:
        if (kind, key) in self._raised:
            return
        try:
            alerts.record(self.meta, self.zone, kind, detail)
            self._raised.add((kind, key))
        except Exception as exc:  # noqa: BLE001 - meta down: the next attempt alerts again
            log.warning("replicator %s: could not record the %s alert: %s", self.zone, kind, exc)

    def fault(self, exc: CaptureFault) -> None:
        self.once(exc.kind, exc.key, exc.detail)

    def binlog_unreadable(self, exc, checkpoint) -> None:
        """The server cannot serve the binlog from the checkpoint (seed cases S000-53,
        S001-08): the file was purged (PURGE BINARY LOGS, the server's own expiry) or the
        position is gone. Reading on from the oldest file there is would lose every
        change in between, so the replicator publishes nothing, raises one alert per
        position, and keeps asking (an operator may restore the file); otherwise the
        consumers of this zone need a full copy."""
        where = f"{checkpoint.log_file}:{checkpoint.log_pos}" if checkpoint else "the zone's first position"
        detail = {
            "checkpoint": where,
            "error": str(exc.args[1] if len(exc.args) > 1 else exc)[:300],
            "action": "restore the binlog file, or give its changes up (zonesync binlog skip-lost) and repair this "
            "zone's consumers with full copies from it",
        }
        self.once("binlog_unreadable", where, detail)
