"""Great Expectations over a consistency check's results: one row per table, chunk and
zone (its status and the numbers the zone computed), validated by a checkpoint whose
Data Docs site is updated with every run (docs/consistency-check.md).

The suite, which a check passes only when it holds for every row:

- the chunk's status is `match` or `settled` (no difference persisted);
- the zone's row count equals the first zone's, except in a settled chunk (there the
  difference was a write in flight);
- `_zs_version` > 0 (the chunk's smallest), every `_zs_origin` a known zone's id (a
  primary key column is never NULL: InnoDB refuses it).

The facts are the numbers the zones computed per chunk (pushed down), never the rows:
the validated DataFrame has chunks x zones rows, whatever the tables' size (a pandas
DataFrame in the Spark driver).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

SUITE = "zonesync_consistency_check"
COLUMNS = ("table", "chunk", "zone", "status", "rows", "first_zone_rows", "min_version", "unknown_origin",
           "counts_equal")  # fmt: skip


def facts(chunks_by_table: dict[str, list[dict]], zones: list[str]) -> list[tuple]:
    """The rows to validate, from the stored chunks (pure)."""
    out = []
    for table, chunks in chunks_by_table.items():
        for c in chunks:
            first = (c["zones"].get(zones[0]) or [None])[0]
            for z in zones:
                n = c["zones"].get(z) or [None, None, None, None]
                equal = c["status"] == "settled" or n[0] == first
                out.append((table, c["chunk"], z, c["status"], n[0], first, n[2], n[3], equal))
    return out


def _suite(gx):
    e = gx.expectations
    return gx.ExpectationSuite(
        name=SUITE,
        expectations=[
            e.ExpectColumnValuesToBeInSet(column="status", value_set=["match", "settled"]),
            e.ExpectColumnValuesToBeInSet(column="counts_equal", value_set=[True]),
            e.ExpectColumnValuesToBeBetween(column="min_version", min_value=1),  # NULL: an empty chunk
            e.ExpectColumnValuesToBeInSet(column="unknown_origin", value_set=[0]),
            e.ExpectColumnValuesToNotBeNull(column="rows"),
        ],
    )


# Modules Great Expectations imports at its own import for one expectation this suite
# never uses (expect_column_kl_divergence_to_be_less_than: scipy.stats, altair for its
# chart): a third of GX's import, 1.3-1.9 CPU-s on a busy machine. Loaded on first use.
DEFERRED = ("scipy.stats", "altair")


class _Deferred(types.ModuleType):
    """Stands in sys.modules for a module until something reads one of its attributes;
    then the module is imported for real (and replaces it there) and answers. (importlib's
    LazyLoader does not do here: the import system reads `__spec__` of a module it finds in
    sys.modules, which makes a lazy module load at once.)"""

    def __getattr__(self, attr):
        real = self.__dict__.get("_deferred_real")
        if real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            self._deferred_real = real
        return getattr(real, attr)


def _defer(name: str) -> None:
    """`name` in sys.modules as a _Deferred until first used (nothing if already imported
    or not installed)."""
    if name in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(name)  # (imports the parent package, cheap here)
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in
    parent, _, child = name.rpartition(".")
    if parent:  # `from scipy import stats` reads the package's attribute first
        setattr(sys.modules[parent], child, stand_in)


def import_gx():
    """great_expectations, with DEFERRED modules loaded only if an expectation uses them."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    for name in DEFERRED:
        _defer(name)
    import great_expectations as gx

    return gx


def validate(rows: list[tuple], project_dir: Path, run_id: str) -> dict:
    """Run the checkpoint on `rows` in the GX project under `project_dir` (its gx/ folder);
    {success, failed expectations, Data Docs index}."""
    gx = import_gx()
    from great_expectations.core.run_identifier import RunIdentifier

    project_dir.mkdir(parents=True, exist_ok=True)
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="file", project_root_dir=str(project_dir))
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)  # no bars in task logs
    # chunks x zones rows: pandas in the driver validates them in a second, where GX's Spark
    # engine ran some fifty Spark jobs for its metrics (7 s)
    asset = ctx.data_sources.add_or_update_pandas(name="zonesync").add_dataframe_asset(name="check_chunks")
    batch = asset.add_batch_definition_whole_dataframe("every chunk and zone")
    suite = ctx.suites.add_or_update(_suite(gx))
    definition = ctx.validation_definitions.add_or_update(gx.ValidationDefinition(name=SUITE, data=batch, suite=suite))
    checkpoint = ctx.checkpoints.add_or_update(
        gx.Checkpoint(name=SUITE, validation_definitions=[definition],
                      actions=[gx.checkpoint.UpdateDataDocsAction(name="data_docs")])
    )  # fmt: skip
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(COLUMNS))
    result = checkpoint.run(batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=run_id))
    failed = [
        {"expectation": r.expectation_config.type, "column": r.expectation_config.kwargs.get("column"),
         "unexpected": r.result.get("unexpected_count"),
         "examples": (r.result.get("partial_unexpected_list") or [])[:5]}
        for v in result.run_results.values()
        for r in v.results
        if not r.success
    ]  # fmt: skip
    sites = ctx.get_docs_sites_urls()
    return {"success": bool(result.success), "failed": failed, "data_docs": sites[0]["site_url"] if sites else None}
