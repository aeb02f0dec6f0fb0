"""capture/lag.py's binlog bytes behind a replicator's read position (SHOW BINARY LOGS rows)."""

from __future__ import annotations

from zonesync.capture.lag import behind_bytes

FILES = [("bin.000001", 1000), ("bin.000002", 500), ("bin.000003", 200)]


def test_bytes_after_the_position_in_its_file_and_every_later_one():
    assert behind_bytes(FILES, "bin.000002", 100) == 400 + 200
    assert behind_bytes(FILES, "bin.000003", 200) == 0, "at the end"
    assert behind_bytes(FILES, "bin.000001", 4) == 996 + 500 + 200


def test_a_position_past_the_listed_size_counts_as_nothing_behind_in_that_file():
    assert behind_bytes(FILES, "bin.000003", 250) == 0


def test_a_purged_file_lies_before_every_listed_one():
    assert behind_bytes(FILES[1:], "bin.000001", 900) == 700
