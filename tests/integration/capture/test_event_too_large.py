"""An event over the broker's message limit (S002-12, a huge LOB) is never truncated and
never skipped: the replicator publishes nothing past it, its checkpoint stays before it,
and one alert names the event."""

from __future__ import annotations

import pytest

from tests.support.replication import alerts, latest_checkpoint, replicator_alone

pytestmark = pytest.mark.integration


def test_an_event_over_the_message_limit_stops_the_replicator_with_an_alert(zone_a_alone, meta):
    conn, cluster = zone_a_alone
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS zonesync_app.lobs")
            cur.execute("CREATE TABLE zonesync_app.lobs (id BIGINT PRIMARY KEY, body LONGTEXT, "
                        "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)")  # fmt: skip
            cur.execute("SET SESSION sql_log_bin = 1")
        cluster.start(zones=("a",), which=("replicator",))
        cluster.wait_started()
        cluster.stop("replicator-a")
        before = latest_checkpoint(meta, "a")
        with conn.cursor() as cur:
            cur.execute("INSERT INTO zonesync_app.lobs VALUES (7, REPEAT('x', 1500000), 1, 1)")
        replicator = replicator_alone(cluster, "a")
        assert replicator.published == 0, "nothing past the event"
        found = alerts(meta, "a", "event_too_large")
        assert len(found) == 1, "one alert, however often it tries again"
        assert (found[0]["table"], found[0]["pk"]) == ("lobs", {"id": 7}) and found[0]["bytes"] > 1_500_000
        after = latest_checkpoint(meta, "a")
        assert (after.log_file, after.log_pos) == (before.log_file, before.log_pos), "the checkpoint stays before it"
    finally:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS zonesync_app.lobs")
