"""Spark job arguments: bad input is refused with the flag and the fix."""

from __future__ import annotations

import argparse

import pytest

from spark_jobs.common import zone_props
from spark_jobs.zone_inventory import parse_args

pytestmark = pytest.mark.unit


def test_zone_pairs_and_password_from_env(monkeypatch):
    monkeypatch.setenv("ZONESYNC_JDBC_PASSWORD_A", "s3cret")
    args = argparse.Namespace(zone=["a=jdbc:mysql://h:1/db"], zone_user=["a=app"])
    url, props = zone_props(args)["a"]
    assert url == "jdbc:mysql://h:1/db" and props["user"] == "app" and props["password"] == "s3cret"


@pytest.mark.parametrize(
    "zone, words",
    [("a", "NAME=VALUE"), ("a=jdbc:mariadb://h:1/db", "jdbc:mysql://"), ("=jdbc:mysql://h/db", "NAME=VALUE")],
)
def test_bad_zone_argument(zone, words):
    with pytest.raises(SystemExit, match=words):
        zone_props(argparse.Namespace(zone=[zone], zone_user=[]))


@pytest.mark.parametrize(
    "argv",
    [
        ["--table", "orders;drop", "--key", "id"],
        ["--table", "orders", "--key", "id", "--partitions", "0"],
    ],
)
def test_bad_job_arguments_exit(argv, capsys):
    with pytest.raises(SystemExit):
        parse_args([*argv, "--zone", "a=jdbc:mysql://h/db", "--output", "/tmp/x"])
    assert "--" in capsys.readouterr().err
