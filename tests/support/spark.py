"""The test run's one local SparkSession (the `spark` fixture's, and helpers' that run a
Spark job in-process without the fixture: the zone switch's verify)."""

from __future__ import annotations


def session():
    """One local[2] SparkSession for the whole run, with the MariaDB JDBC driver and
    zonesync's jar (created on first use, the same one after)."""
    from pyspark.sql import SparkSession

    from zonesync import jvm

    return (
        SparkSession.builder.master("local[2]")
        .appName("zonesync-tests")
        .config("spark.jars", jvm.jars_option())
        .config("spark.driver.extraClassPath", jvm.class_path())
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
