"""Capture lag (seed S000-68): how far a replicator reads behind its zone's binlog, in meta.

Appliers report broker -> target lag only; commits a replicator has not read yet (a slow
link to its zone, a replicator starved of CPU, a large transaction being counted) are
invisible there. So each replicator reports, once a second, in meta's capture_lag:

- where it reads: the position after the last transaction it read (or the binlog end
  when it sits idle there, told by a heartbeat);
- bytes behind: the binlog bytes after that position (SHOW BINARY LOGS: the rest of
  its file and every later file);
- seconds behind: when bytes remain, how old the last transaction it read is (its
  commit time; MySQL's Seconds_Behind_Master for the capture side), else 0.

The report runs on a thread of its own with its own connections: over a slow link a
SHOW BINARY LOGS may take seconds, and the reading loop must not wait for it. It is best
effort: a failed report is tried again the next second (meta or the zone unreachable).
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("zonesync.replicator")
REPORT_EVERY_S = 1.0


class CaptureLag:
    """Reports `read_at()` -> (log_file, log_pos, commit time of the last transaction read,
    or None at the binlog end) for `zone`, every second, until stopped."""

    def __init__(self, zone: str, source, meta, read_at):
        self.zone, self.source, self.meta, self.read_at = zone, source, meta, read_at
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CaptureLag:
        self._thread = threading.Thread(target=self._run, name=f"capture-lag-{self.zone}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(REPORT_EVERY_S):
            at = self.read_at()
            if at is None:
                continue
            try:
                self._report(*at)
            except Exception as exc:  # noqa: BLE001 - best effort: the next second tries again
                log.debug("replicator %s: capture lag not reported: %s", self.zone, exc)

    def _report(self, log_file: str, log_pos: int, read_ts: float | None) -> None:
        conn = self.source.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                files = [(row[0], int(row[1])) for row in cur.fetchall()]
        finally:
            conn.close()
        behind = behind_bytes(files, log_file, log_pos)
        seconds = 0.0 if behind == 0 or read_ts is None else max(0.0, time.time() - read_ts)
        self.meta.run(
            "INSERT INTO capture_lag (zone, log_file, log_pos, behind_bytes, behind_seconds) VALUES "
            "(%s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE log_file = VALUES(log_file), log_pos = VALUES(log_pos), "
            "behind_bytes = VALUES(behind_bytes), behind_seconds = VALUES(behind_seconds), updated_at = NOW(6)",
            (self.zone, log_file, log_pos, behind, seconds),
        )


def behind_bytes(files: list[tuple[str, int]], log_file: str, log_pos: int) -> int:
    """Binlog bytes after (log_file, log_pos), from SHOW BINARY LOGS' (name, size) rows in
    order. A file no longer listed (purged under the reader) lies before all of them."""
    names = [name for name, _ in files]
    if log_file not in names:
        return sum(size for _, size in files)
    at = names.index(log_file)
    return max(0, files[at][1] - log_pos) + sum(size for _, size in files[at + 1 :])


def report(meta) -> list[tuple[str, int, float, float]]:
    """(zone, bytes behind, seconds behind, report age in s) per zone's replicator."""
    rows, _ = meta.run(
        "SELECT zone, behind_bytes, behind_seconds, TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6)) / 1e6 "
        "FROM capture_lag ORDER BY zone"
    )
    return [(z, int(b), float(s), float(age)) for z, b, s, age in rows]
