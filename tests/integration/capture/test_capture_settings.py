"""What capture needs from a zone's server (S003-28: whole rows; S002-04: durable commits)."""

from __future__ import annotations

import logging

import pytest

from tests.support.replication import alerts, latest_checkpoint
from zonesync.capture.source import SourceSettings

pytestmark = pytest.mark.integration


def test_a_zone_without_full_row_images_is_refused(zone_a_alone, meta, caplog):
    """binlog_row_image MINIMAL would publish updates without the columns they did not
    change: the applier would write partial rows (the seed's 字段组 problem). The
    replicator refuses the zone, with one alert, before taking any position."""
    conn, cluster = zone_a_alone
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        replicator = cluster.make_replicator("a")
        with pytest.raises(SourceSettings, match="binlog_row_image is MINIMAL, capture needs FULL"):
            replicator.run(max_seconds=5)
        assert replicator.published == 0 and latest_checkpoint(meta, "a") is None
        assert [a["error"][:40] for a in alerts(meta, "a", "binlog_settings")] == [
            f"zone database 127.0.0.1:{conn.port}: binlog_row"[:40]
        ]
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL binlog_row_image = 'FULL'")
    with caplog.at_level(logging.WARNING, logger="zonesync.replicator"):
        cluster.make_replicator("a").run(max_seconds=2)
    assert latest_checkpoint(meta, "a") is not None, "with FULL images it captures"
    # the test zones trade durability for speed: said once, not refused
    assert any("sync_binlog is 0" in r.getMessage() for r in caplog.records)
