"""zonesync's Spark jobs (one module per job, helpers beside them).

Importing the package first moves spark-submit's `pyspark.zip` and `py4j-*.zip` behind
the installed packages they were cut from, when those are the same files: Python keeps
no compiled code for modules imported from a zip, so every job compiled pyspark's
sources again at its start (0.7 CPU-s of the driver's, measured on the check job), while
the pip-installed pyspark (whose `python/lib` holds those zips: SPARK_HOME is the
package) and py4j of the zip's version are byte-compiled once. A Spark distribution
with no such installation keeps its zips first.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path


def _installed_copy(zip_path: Path) -> bool:
    """Whether `zip_path` is one of the installed pyspark's own zips, with py4j installed
    at the version the zip's name gives."""
    try:
        import importlib.machinery

        entries = [p for p in sys.path if not p.endswith(".zip")]
        spec = importlib.machinery.PathFinder.find_spec("pyspark", entries)
        if spec is None or not spec.submodule_search_locations:
            return False
        package = Path(next(iter(spec.submodule_search_locations))).resolve()
        if zip_path.resolve().parent != package / "python" / "lib":
            return False
        if zip_path.name.startswith("py4j-"):
            return zip_path.name == f"py4j-{metadata.version('py4j')}-src.zip"
        return zip_path.name == "pyspark.zip"
    except (metadata.PackageNotFoundError, OSError, ValueError):
        return False


def _prefer_compiled_pyspark() -> None:
    if "pyspark" in sys.modules:
        return
    moved = [p for p in sys.path if p.endswith(".zip") and _installed_copy(Path(p))]
    for p in moved:
        sys.path.remove(p)
    sys.path.extend(moved)


_prefer_compiled_pyspark()
