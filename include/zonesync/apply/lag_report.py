"""Step 5 of the applier (applier.py): lag per (source zone, partition), to meta.

Every second each partition's events and seconds behind go to meta's apply_lag, for
`zonesync lag` and `wait_applied`. The figures come from what the consumer already
knows (the high watermark of the last fetch, no broker round trip) and from the
commit time of the last event applied; while meta is down they are dropped, not
queued (the next second's figures replace them).

WARNING (seed S003-33's first exception instruction): a partition more than
`lag_warning_s` seconds behind raises one `lag_warning` alert, and nothing else:
apply goes on. It is raised again only after the partition came back under half
the threshold (one alert per episode, not one per second).
"""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition


class LagReport:
    """Reporting lag (a part of Applier: uses its state, offsets and meta)."""

    def _report_lag(self, consumer) -> None:
        rows = []
        now = time.time()
        for (source, partition), st in self.state.items():
            try:
                # the high watermark the last fetch brought (no broker round trip); a
                # partition nothing was fetched from yet reports a negative one: skip it
                _, high = consumer.get_watermark_offsets(TopicPartition(self.topic_of(source), partition), cached=True)
                if high < 0:
                    continue
            except Exception:  # noqa: BLE001 - lag is best effort
                continue
            # Kafka counts messages; a message holds one event or a burst of them: the
            # events behind are estimated by the size of the last message read from it
            messages = max(0, high - (self._offsets.get((source, partition), -1) + 1))
            behind = messages * self._per_message.get((source, partition), 1)
            last_ts = self._last_commit_ts.get((source, partition))
            seconds = 0.0 if behind == 0 or last_ts is None else max(0.0, now - last_ts)
            rows.append((source, self.zone, partition, st.applied_lsn, behind, seconds))
            self._warn_lag(source, partition, behind, seconds)
        if rows:
            self.meta_outage.call(self._write_lag, rows)

    def _warn_lag(self, source: str, partition: int, behind: int, seconds: float) -> None:
        key = (source, partition)
        if seconds >= self.lag_warning_s and key not in self._lag_warned:
            self._lag_warned.add(key)
            self.alert(
                "lag_warning",
                {"source": source, "partition": partition, "behind_events": behind,
                 "behind_seconds": round(seconds, 1), "threshold_s": self.lag_warning_s},
            )  # fmt: skip
        elif seconds < self.lag_warning_s / 2:
            self._lag_warned.discard(key)

    def _write_lag(self, rows: list[tuple]) -> None:
        conn = self.meta.connect()
        try:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, "
                    "behind_seconds) VALUES (%s,%s,%s,%s,%s,%s) ON DUPLICATE KEY UPDATE applied_lsn = "
                    "VALUES(applied_lsn), behind_events = VALUES(behind_events), behind_seconds = "
                    "VALUES(behind_seconds), updated_at = NOW(6)",
                    rows,
                )
        finally:
            conn.close()
