"""The jars every zonesync Spark job runs with: the MariaDB JDBC driver (Debian's
libmariadb-java) and zonesync's own JVM code (spark_jobs/jvm, built by `make setup`
through scripts/build_jar.py), which lands copied rows without a Python worker; and the
driver JVM's class-data archive, which makes a Spark job start faster."""

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


# Class data sharing: the classes a zonesync Spark driver loads (Spark's, the JDBC
# driver's, zonesync's), archived once by `make setup` (scripts/build_jar.py) and mapped
# by every later driver JVM instead of loaded and verified again: spark-submit's start
# drops from about 4.9 s to 3.0 s here, a tenth of a 10M-row copy. A JVM that finds the
# archive stale (another JDK, other jars) says so in the log and starts without it.
DRIVER_ARCHIVE = JVM_SOURCES / "spark-driver.jsa"


# A driver that only hands out work and waits (the consistency check: the zones compute,
# two numbers per chunk come back) needs no optimising compiler: with C1 alone its JVM
# spends 3.5 CPU-seconds instead of 7.5 on a 10M-row check, and the check ends 1.5 s
# sooner on two cores. A driver that moves rows itself (the full copy in local mode,
# where the executors share its JVM) keeps C2.
DISPATCH_ONLY = "-XX:TieredStopAtLevel=1"


def driver_java_options(dispatch_only: bool = False) -> str:
    """spark.driver.extraJavaOptions for a zonesync job (empty without the archive and
    without `dispatch_only`)."""
    options = [f"-XX:SharedArchiveFile={DRIVER_ARCHIVE} -Xshare:auto"] if DRIVER_ARCHIVE.exists() else []
    return " ".join([*options, *([DISPATCH_ONLY] if dispatch_only else [])])


def driver_conf(dispatch_only: bool = False) -> dict[str, str]:
    """spark-submit --conf entries a zonesync job's driver runs with."""
    options = driver_java_options(dispatch_only)
    return {"spark.driver.extraJavaOptions": options} if options else {}


def submit_options(dispatch_only: bool = False) -> list[str]:
    """spark-submit's options for a zonesync job: both jars, the driver's class path and
    its JVM options (driver_conf), no UI."""
    conf = [a for k, v in driver_conf(dispatch_only).items() for a in ("--conf", f"{k}={v}")]
    return ["--jars", jars_option(), "--driver-class-path", class_path(), "--conf", "spark.ui.enabled=false", *conf]
