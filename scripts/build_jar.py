"""Build zonesync's JVM code (spark_jobs/jvm/**/*.java) into spark_jobs/jvm/zonesync-spark.jar.

`make setup` runs this after installing the packages: compiled against the Spark jars
of the venv's pyspark with the JDK's javac, rebuilt whenever a source (or its
directory: a source deleted) is newer than the jar. The full copy's row copy needs it
(spark_jobs/full_copy.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "include"))

from zonesync.jvm import DRIVER_ARCHIVE, JVM_SOURCES, ZONESYNC_JAR, class_path, jars_option  # noqa: E402

# What a zonesync driver loads, run once to archive it: a session, the JDBC driver,
# zonesync's classes, one job of a JVM RDD, a stop.
WARM_UP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
jvm = spark._jvm
for name in ("org.mariadb.jdbc.Driver", "zonesync.spark.ChunkCopier", "zonesync.spark.ZoneQueries"):
    jvm.java.lang.Class.forName(name)
spark.sparkContext._jsc.parallelize(jvm.java.util.ArrayList(), 1).count()
spark.stop()
"""


def main() -> int:
    import pyspark

    sources = sorted(JVM_SOURCES.rglob("*.java"))
    jar = Path(ZONESYNC_JAR)
    # a source's directory too: deleting a source changes only its directory's time
    inputs = [*sources, *{s.parent for s in sources}]
    if jar.exists() and all(jar.stat().st_mtime >= p.stat().st_mtime for p in inputs):
        return build_archive(jar)
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar_tool:
        print("build_jar: no javac/jar: install openjdk-17-jdk-headless (make setup does)", file=sys.stderr)
        return 2
    spark_jars = Path(pyspark.__file__).resolve().parent / "jars"
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([javac, "--release", "17", "-Xlint:all,-path", "-Werror", "-d", out,
                        "-cp", f"{spark_jars}/*", *map(str, sources)], check=True)  # fmt: skip
        tmp = jar.with_suffix(".tmp")
        subprocess.run([jar_tool, "cf", str(tmp), "-C", out, "."], check=True)
        tmp.replace(jar)
    print(f"setup: built {jar.relative_to(ROOT)}")
    return build_archive(jar)


def build_archive(jar: Path) -> int:
    """The driver's class-data archive (zonesync.jvm.DRIVER_ARCHIVE), made again when the
    jar or pyspark's jars are newer. Without it jobs only start slower: a failure here
    is reported, not fatal."""
    import os

    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    archive = Path(DRIVER_ARCHIVE)
    if archive.exists() and archive.stat().st_mtime >= max(jar.stat().st_mtime, (home / "jars").stat().st_mtime):
        return 0
    with tempfile.TemporaryDirectory() as work:
        job, tmp = Path(work) / "warm_up.py", Path(work) / "driver.jsa"
        job.write_text(WARM_UP)
        env = dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        done = subprocess.run(
            [str(home / "bin" / "spark-submit"), "--master", "local[1]", "--jars", jars_option(),
             "--driver-class-path", class_path(), "--conf", "spark.ui.enabled=false",
             "--conf", f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={tmp}", str(job)],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0 or not tmp.exists():
            print(f"setup: no driver class-data archive (jobs start slower): {done.stderr[-300:]}", file=sys.stderr)
            return 0
        tmp.replace(archive)
    print(f"setup: built {archive.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
