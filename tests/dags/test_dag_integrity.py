"""Every DAG imports cleanly, fast, and without touching the network or a process."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.dags

DAGS = Path(__file__).resolve().parents[2] / "dags"


class IOAtImport(AssertionError):
    pass


@pytest.fixture(scope="module")
def dagbag():
    """Parse dags/ with sockets and subprocesses forbidden: I/O at import fails the parse."""
    from airflow.dag_processing.dagbag import DagBag

    def no_connect(*args, **kwargs):
        raise IOAtImport(f"network I/O at DAG import: connect{args[1:]}")

    def no_popen(*args, **kwargs):
        raise IOAtImport(f"subprocess at DAG import: {args[1] if len(args) > 1 else kwargs.get('args')}")

    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", no_connect)
    mp.setattr(subprocess.Popen, "__init__", no_popen)
    started = time.monotonic()
    try:
        bag = DagBag(dag_folder=str(DAGS))
    finally:
        mp.undo()
    bag.parse_seconds = time.monotonic() - started
    return bag


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}, dagbag.import_errors
    assert dagbag.dags, "no DAG found in dags/"


def test_one_dag_per_file_named_after_it(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert Path(dag.fileloc).stem == dag_id, f"{dag_id} lives in {dag.fileloc}"
    files = [p for p in DAGS.glob("*.py") if not p.name.startswith("_")]
    assert len(files) == len(dagbag.dags)


def test_every_dag_has_tags_description_and_retries(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.tags, f"{dag_id} has no tags"
        assert dag.description, f"{dag_id} has no description"
        for task in dag.tasks:
            assert task.retries >= 2, f"{dag_id}.{task.task_id} retries={task.retries}: need >= 2"


def test_params_have_schemas(dagbag):
    """The trigger form and the REST API validate params only when each has a type."""
    for dag_id, dag in dagbag.dags.items():
        for name, param in dag.params.items():
            assert param.schema.get("type"), f"{dag_id} param {name} has no JSON schema type"


def test_dags_parse_quickly(dagbag):
    assert dagbag.parse_seconds < 30, f"parsing dags/ took {dagbag.parse_seconds:.1f} s"
