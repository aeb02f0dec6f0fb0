"""The jars every zonesync Spark job runs with: the MariaDB JDBC driver (Debian's
libmariadb-java) and zonesync's own JVM code (spark_jobs/jvm, built by `make setup`
through scripts/build_jar.py), which lands copied rows without a Python worker."""

from __future__ import annotations

from pathlib import Path

MARIADB_JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
JVM_SOURCES = Path(__file__).resolve().parents[2] / "spark_jobs" / "jvm"
ZONESYNC_JAR = str(JVM_SOURCES / "zonesync-spark.jar")
SPARK_JARS = (MARIADB_JDBC_JAR, ZONESYNC_JAR)


def jars_option() -> str:
    """spark-submit --jars / spark.jars: both jars (executors and the driver)."""
    return ",".join(SPARK_JARS)


def class_path() -> str:
    """--driver-class-path / spark.driver.extraClassPath."""
    return ":".join(SPARK_JARS)
