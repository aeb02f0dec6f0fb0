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


# What spark-submit inherits from the process that starts it (an Airflow worker): the
# names a JVM, Spark and the job's Python need, and zonesync's own settings; never
# Airflow's environment (its Fernet key, JWT secret, metadata DSN, every AIRFLOW_CONN_*)
# nor a setting that may carry a credential (a password, secret, token or key, a URL
# with its user:password). The job's own secrets (each zone's JDBC password, the meta
# store's) are added by name by whoever starts it.
SUBMIT_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "JAVA_HOME",
    "SPARK_HOME", "SPARK_CONF_DIR", "SPARK_LOCAL_IP", "SPARK_LOCAL_DIRS", "SPARK_LOG_DIR", "HADOOP_CONF_DIR",
    "YARN_CONF_DIR", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV",
})  # fmt: skip
_CREDENTIAL = (
    "PASSWORD",
    "PASSWD",
    "PWD",
    "SECRET",
    "TOKEN",
    "KEY",
    "AUTH",
    "JAAS",
    "CERT",
    "_URL",
    "_DSN",
    "CREDENTIAL",
)


def submit_env(environ, secrets: dict[str, str]) -> dict[str, str]:
    """spark-submit's environment: the allowed part of `environ` (above) and `secrets`."""
    kept = {
        k: v
        for k, v in environ.items()
        if k in SUBMIT_ENV
        or k.startswith("LC_")
        or (k.startswith("ZONESYNC_") and not any(word in k for word in _CREDENTIAL))
    }
    return {**kept, **secrets}
