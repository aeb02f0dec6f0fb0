"""A job's driver imports the installed, byte-compiled pyspark rather than spark-submit's
zip of the same files (spark_jobs/__init__.py), and a foreign Spark's zip keeps its place."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
LIB = Path(pyspark.__file__).resolve().parent / "python" / "lib"


def _imported_from(*path_entries: Path) -> str:
    """Where pyspark comes from in a driver whose PYTHONPATH is `path_entries` (as
    spark-submit sets it) after `import spark_jobs`."""
    code = "import spark_jobs, pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"
    env = {"PYTHONPATH": ":".join(map(str, [*path_entries, REPO, REPO / "include"])), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_spark_submits_zips_of_the_installed_pyspark_step_aside():
    zips = [LIB / "pyspark.zip", *LIB.glob("py4j-*-src.zip")]
    assert len(zips) == 2 and all(z.exists() for z in zips)
    out = _imported_from(*zips)
    assert ".zip" not in out, out
    assert str(Path(pyspark.__file__).resolve()) in out


def test_a_foreign_sparks_zip_keeps_its_place(tmp_path):
    """A Spark distribution other than the installed package (its own python/lib) is left first."""
    foreign = tmp_path / "spark" / "python" / "lib"
    foreign.mkdir(parents=True)
    shutil.copy(LIB / "pyspark.zip", foreign / "pyspark.zip")
    out = _imported_from(foreign / "pyspark.zip")
    assert str(foreign / "pyspark.zip") in out.splitlines()[0], out
