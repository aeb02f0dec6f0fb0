"""What every zonesync Spark job shares: zone arguments, the session, JDBC reads.

Zones arrive as `--zone NAME=JDBC_URL` and `--zone-user NAME=USER`; the password
of each is read from the environment variable ZONESYNC_JDBC_PASSWORD_<NAME> so it
never appears in a command line.
"""

from __future__ import annotations

import argparse
import os
import urllib.parse

JDBC_DRIVER = "org.mariadb.jdbc.Driver"


def add_zone_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zone", action="append", default=[], metavar="NAME=JDBC_URL", required=True)
    parser.add_argument("--zone-user", action="append", default=[], metavar="NAME=USER")
    parser.add_argument("--output", required=True, help="file the job writes its JSON result to")


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise SystemExit(f"{flag} {value!r}: expected NAME=VALUE, e.g. {flag} a=jdbc:mysql://host:3306/db")
        out[name] = rest
    return out


def zone_props(args: argparse.Namespace) -> dict[str, tuple[str, dict]]:
    """Zone name -> (JDBC URL, connection properties)."""
    urls = _pairs(args.zone, "--zone")
    users = _pairs(args.zone_user, "--zone-user")
    out = {}
    for name, url in urls.items():
        if not url.startswith("jdbc:mysql://"):
            raise SystemExit(
                f"--zone {name}: {url!r} must be a jdbc:mysql:// URL (jdbc:mariadb:// breaks partitioning)"
            )
        props = {
            "driver": JDBC_DRIVER,
            "user": users.get(name, "root"),
            "password": os.environ.get(f"ZONESYNC_JDBC_PASSWORD_{name.upper()}", ""),
            # TIMESTAMPs are compared and copied as UTC everywhere in zonesync.
            "sessionInitStatement": "SET time_zone = '+00:00'",
            # TINYINT(1) and YEAR as the numbers they hold: read as BIT/DATE, a 2 would be
            # copied as 1 and a year as a date
            "tinyInt1isBit": "false",
            "yearIsDateType": "false",
        }
        out[name] = (url, props)
    return out


def build_session(app_name: str):
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        # a job per wave: keep the status of the last few, not of the last thousand (the
        # driver's memory then stays flat however many waves a large table takes)
        .config("spark.ui.retainedJobs", "50")
        .config("spark.ui.retainedStages", "50")
        .config("spark.ui.retainedTasks", "5000")
        .config("spark.sql.ui.retainedExecutions", "20")
        .getOrCreate()
    )


def jvm_endpoint(spark, url: str, props: dict, session: str, **extra: str):
    """A zone as the JVM code's connection endpoint (ChunkCopier.Endpoint): the JDBC URL,
    the user and password of `props`, the session variables `session`, TINYINT(1) and
    YEAR read as numbers, and any `extra` driver properties."""
    jvm = spark._jvm
    jprops = jvm.java.util.Properties()
    for k, v in {"user": props["user"], "password": props["password"], "sessionVariables": session,
                 "tinyInt1isBit": "false", "yearIsDateType": "false", **extra}.items():  # fmt: skip
        jprops.setProperty(k, v)
    return jvm.zonesync.spark.ChunkCopier.Endpoint(url, jprops)


def read_table_partitioned(spark, url: str, props: dict, table: str, key: str, partitions: int):
    """Read `table` split into `partitions` ranges of the integer column `key`.

    The bounds come from one MIN/MAX query; an empty table is read unsplit.
    """
    from zonesync.sql_names import quote

    bounds = spark.read.jdbc(
        url, f"(SELECT MIN({quote(key)}) AS lo, MAX({quote(key)}) AS hi FROM {quote(table)}) AS b", properties=props
    ).collect()[0]
    if bounds["lo"] is None or partitions <= 1:
        return spark.read.jdbc(url, quote(table), properties=props)
    return spark.read.jdbc(
        url,
        quote(table),
        column=key,
        lowerBound=int(bounds["lo"]),
        upperBound=int(bounds["hi"]) + 1,
        numPartitions=partitions,
        properties=props,
    )


def meta_config(args):
    """The meta store of a job's `--meta` URL (its password from the environment), or the
    environment's (ZONESYNC_META_URL, the dev env's)."""
    from zonesync.meta.db import MetaConfig

    env = dict(os.environ)
    if getattr(args, "meta", None):
        env["ZONESYNC_META_URL"] = args.meta
    return MetaConfig.from_env(env)


def tag_rules(args):
    """(version, TagRules) in force in the job's meta store, or None when none is published."""
    from zonesync.meta.store import MetaStore

    return MetaStore(meta_config(args)).tags_at()


def connect_kwargs(url: str, props: dict) -> dict:
    """pymysql.connect's arguments for the zone a jdbc:mysql://host:port/db URL names, with
    the JDBC properties' user and password: plain values, for code that runs on executors
    (which import neither this package nor the job's module)."""
    parsed = urllib.parse.urlparse(url[len("jdbc:") :])
    return {
        "host": parsed.hostname,
        "port": parsed.port or 3306,
        "user": props.get("user", "root"),
        "password": props.get("password", ""),
        "database": parsed.path.lstrip("/") or None,
        "autocommit": False,
        "init_command": "SET time_zone = '+00:00'",
        "connect_timeout": 10,
    }


def db_connect(url: str, props: dict):
    """A DB-API connection (the driver's own statements: planning, merges) to the zone a
    jdbc:mysql://host:port/db URL names, with the JDBC properties' user and password."""
    import pymysql

    return pymysql.connect(**connect_kwargs(url, props))
