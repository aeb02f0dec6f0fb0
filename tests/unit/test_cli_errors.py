"""The command line's bad days: one line naming the cause, and nothing changed first."""

from __future__ import annotations

import pymysql
import pytest

from zonesync import cli
from zonesync.dev import procs

pytestmark = pytest.mark.unit


def _closed_port_url(db: str) -> str:
    return f"mysql://zs:pw@127.0.0.1:{procs.free_port()}/{db}"


def test_meta_migrate_checks_zone_names_before_touching_the_meta_store(monkeypatch, capsys):
    """The names are refused before any connection: the meta URL points at a closed port,
    so a connection attempt would have been the error instead."""
    monkeypatch.setenv("ZONESYNC_DEV", "0")
    monkeypatch.setenv("ZONESYNC_META_URL", _closed_port_url("zonesync_meta"))
    assert cli.main(["meta", "migrate", "--zones", "a,B"]) != 0
    err = capsys.readouterr().err.strip()
    assert "--zones: zone name 'B' is invalid" in err and "unreachable" not in err and "\n" not in err


def test_a_database_that_is_down_is_one_line():
    try:
        pymysql.connect(host="127.0.0.1", port=procs.free_port(), user="zs", password="pw", connect_timeout=2)
    except pymysql.err.OperationalError as exc:
        line = cli._unreachable(exc)
    assert line is not None and line.startswith("a database is unreachable: Can't connect") and "\n" not in line
    assert cli._unreachable(pymysql.err.OperationalError(1213, "Deadlock found")) is None  # not this kind
