"""The compose zones' server settings (docker/mysql/zonesync.cnf): what capture and its
retention rely on, checked where no server runs."""

from __future__ import annotations

import configparser
from pathlib import Path

CNF = Path(__file__).resolve().parents[2] / "docker" / "mysql" / "zonesync.cnf"


def _settings() -> dict[str, str]:
    parser = configparser.ConfigParser(allow_no_value=True, inline_comment_prefixes=("#",))
    parser.read(CNF)
    return {k.replace("-", "_"): (v or "").strip() for k, v in parser["mysqld"].items()}


def test_compose_zones_capture_whole_rows_and_never_purge_by_themselves():
    """S003-28: ROW events, FULL images and metadata. S001-08: the server's own expiry is
    off (safe-purge decides), with the longest period behind it. S002-04: durable commits."""
    s = _settings()
    assert (s["binlog_format"], s["binlog_row_image"], s["binlog_row_metadata"]) == ("ROW", "FULL", "FULL")
    assert s["binlog_expire_logs_auto_purge"] == "OFF"
    assert int(s["binlog_expire_logs_seconds"]) == 2**32 - 1
    assert (s["sync_binlog"], s["innodb_flush_log_at_trx_commit"]) == ("1", "1")
