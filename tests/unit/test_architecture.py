"""The house rules of docs/architecture.md, checked on the source: imports run downward
and never in a circle (function-level imports included), and no function in capture/ or
apply/ grows past ~80 lines without a stated reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2] / "include"
PACKAGE = ROOT / "zonesync"
# Lower layers may not import these (they sit on top: they build and run the others).
TOP = ("zonesync.cli", "zonesync.console", "zonesync.dev", "zonesync.runtime.workers", "zonesync.repartition")
LOWER = ("zonesync.events", "zonesync.meta", "zonesync.rules", "zonesync.dal", "zonesync.capture", "zonesync.apply")
# Known long functions and why (checked: each must still exist and still be long).
LONG_ALLOWED = {
    # the replicator's per-row loop: splitting it costs a call per rows event on the hot path
    "zonesync.capture.publish.queue_txn_events": 90,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every zonesync module this file imports, at any depth of the code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("zonesync"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("zonesync"))
    return {m for m in found if m in MODULES}


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_zonesync():
    assert _cycles(GRAPH) == []


def test_lower_layers_never_import_the_top():
    upward = [(mod, dep) for mod, deps in GRAPH.items() if mod.startswith(LOWER) for dep in deps if dep.startswith(TOP)]
    assert upward == []


def test_no_airflow_or_spark_at_module_level_of_the_core():
    heavy = []
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                heavy += [(name, n) for n in names if n.split(".")[0] in ("airflow", "pyspark")]
    assert heavy == []


def test_no_long_functions_in_the_protocol_loops():
    long = {}
    for name, path in MODULES.items():
        if not name.startswith(("zonesync.capture", "zonesync.apply")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long[f"{name}.{node.name}"] = lines
    over = {f: n for f, n in long.items() if n > LONG_ALLOWED.get(f, 80)}
    assert over == {}, "split them, or name the reason in LONG_ALLOWED"
    assert set(LONG_ALLOWED) <= set(long), "an allowed long function got short: drop it from LONG_ALLOWED"
