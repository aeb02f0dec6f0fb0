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

from zonesync.jvm import JVM_SOURCES, ZONESYNC_JAR  # noqa: E402


def main() -> int:
    import pyspark

    sources = sorted(JVM_SOURCES.rglob("*.java"))
    jar = Path(ZONESYNC_JAR)
    # a source's directory too: deleting a source changes only its directory's time
    inputs = [*sources, *{s.parent for s in sources}]
    if jar.exists() and all(jar.stat().st_mtime >= p.stat().st_mtime for p in inputs):
        return 0
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
