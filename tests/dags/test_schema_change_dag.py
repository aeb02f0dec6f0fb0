"""schema_change through Airflow's dag.test(): real zones, replication threads in all three.

A column renamed by hand in zone a (an operator's first step, or an earlier run that
failed after it) makes b and c hold the table while a's writes go on; the DAG learns the
new definition on a scratch copy, skips a, renames in b and c, verifies, and drains the
holds: every zone ends with the same rows and the same definition. A statement one zone
refuses stops the run there, the zones already changed are left changed and reported,
and nothing is resumed. Bad input is refused before anything changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.background import wait_until
from tests.support.drift import TABLE, drop_tables, fresh_tables, run_sql, writing
from tests.support.replication import Cluster, reset_state
from zonesync.apply.batch import table_holds
from zonesync.console import runs as console_runs
from zonesync.meta import schema_changes
from zonesync.schema import definitions
from zonesync.schema import runs as schema_runs

pytestmark = [pytest.mark.dags, pytest.mark.integration, pytest.mark.slow]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "schema_change.py"
ZONES = ("a", "b", "c")


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE)).dags["schema_change"]


def _rows(conn):
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM zonesync_app.{TABLE} ORDER BY id")
        return cur.fetchall()


@pytest.fixture
def mesh(airflow_db, zones, meta, broker, test_cfg):
    """The table in every zone, the same; replicators and appliers of a, b and c."""
    reset_state(zones, meta)
    conns = {z: zones[z].connect() for z in ZONES}
    fresh_tables(conns.values())
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=4)
    cluster.start()
    cluster.wait_started()
    try:
        yield conns
    finally:
        cluster.stop()
        drop_tables(conns.values())
        reset_state(zones, meta)


def _states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_a_rename_begun_by_hand_is_rolled_through_and_the_holds_drain(mesh, zones, meta, dag):
    a = mesh["a"]
    with writing(zones["a"]) as written:
        run_sql(a, f"ALTER TABLE zonesync_app.{TABLE} RENAME COLUMN note TO memo")
        wait_until(lambda: all(TABLE in table_holds.holds(mesh[z]) for z in ("b", "c")), 30, "b and c hold it")
        run = dag.test(run_conf={"sql": f"ALTER TABLE {TABLE} RENAME COLUMN note TO memo", "reason": "dag test"})
        states = _states(run)
        assert run.state == "success", states  # (apply skipped a: the rename would fail there)
        recorded = schema_runs.get(meta, run.run_id)
        assert (recorded["status"], recorded["table"], sorted(recorded["drain"])) == ("succeeded", TABLE, ["b", "c"])
        wait_until(lambda: not any(table_holds.holds(mesh[z]) for z in ZONES), 30, "the holds drained")
    wait_until(lambda: _rows(mesh["b"]) == _rows(a) == _rows(mesh["c"]), 30, "every zone has a's rows")
    # the console's runs: the change, and its drain (it outlives the run) drained now
    listed = console_runs.recent(meta, "schema", 1, zone_conn=lambda z: zones[z].connect())["runs"][0]
    assert (listed["run_id"], listed["phase"], listed["dag_id"]) == (run.run_id, "draining", "schema_change")
    assert listed["what"] == f"ALTER TABLE {TABLE} RENAME COLUMN note TO memo in zones a, b, c", listed
    drained = sum(recorded["drain"].values())
    assert listed["progress"]["drained"] and listed["progress"]["done"] == listed["progress"]["total"] == drained
    assert len(_rows(a)) == len(written)
    shapes = {z: definitions.read(mesh[z], [TABLE]) for z in ZONES}
    assert all("memo" in shapes[z][TABLE].columns for z in ZONES) and definitions.diff(shapes) == []
    recorded = {c.zone for c in schema_changes.recent(meta, TABLE)}
    assert recorded == {"a", "b", "c"}, "each zone's replicator read its rename"


def test_a_rename_rolled_through_while_a_writes_loses_and_mismaps_nothing(mesh, zones, meta, dag):
    """The DAG alone, a first: before b and c change, each has applied what a wrote up to
    then (old-shape rows fit only until the rename); a's rows of the new shape wait in
    their holds, which resume drains."""
    a = mesh["a"]
    with writing(zones["a"]) as written:
        conf = {"sql": f"ALTER TABLE {TABLE} RENAME COLUMN note TO memo", "reason": "dag test", "zones": list(ZONES)}
        run = dag.test(run_conf=conf)
        assert run.state == "success", _states(run)
        wait_until(lambda: len(written) >= 40, 10, "a writes on")
    wait_until(lambda: not any(table_holds.holds(mesh[z]) for z in ZONES), 30, "no hold left")
    wait_until(lambda: _rows(mesh["b"]) == _rows(a) == _rows(mesh["c"]), 30, "every zone has a's rows")
    assert len(_rows(a)) == len(written)


def test_a_statement_one_zone_refuses_stops_there_and_resumes_nothing(mesh, meta, dag):
    run_sql(mesh["c"], f"INSERT INTO zonesync_app.{TABLE} (id, qty) VALUES (1, 7), (2, 7)", logged=False)
    run = dag.test(run_conf={"sql": f"CREATE UNIQUE INDEX uq_qty ON {TABLE} (qty)", "reason": "dag test",
                             "zones": ["a", "b", "c"]})  # fmt: skip
    states = _states(run)
    assert run.state == "failed", states
    assert states["apply"] == "failed" and states["resume"] == "upstream_failed", states
    assert states["report"] == "failed", states
    recorded = schema_runs.get(meta, run.run_id)
    assert (recorded["status"], recorded["phase"], recorded["drain"]) == ("failed", "applying", None), recorded
    unique = {z: definitions.read(mesh[z], [TABLE])[TABLE].unique_keys for z in ZONES}
    assert unique == {"a": {("qty",)}, "b": {("qty",)}, "c": set()}


def test_bad_input_is_refused_before_anything_changes(mesh, dag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="sql"):
        dag.test(run_conf={"sql": "", "reason": "r"})
    with pytest.raises(ParamValidationError, match="zones"):
        dag.test(run_conf={"sql": "ALTER TABLE drift ADD x INT", "reason": "r", "zones": ["A;drop"]})
    before = {z: definitions.read(mesh[z], [TABLE]) for z in ZONES}
    assert all(TABLE in before[z] for z in ZONES)
    # (what each refusal says: tests/unit/test_schema_changes.py)
    for sql in ("DROP TABLE drift", "ALTER TABLE drift ADD x INT; DROP TABLE drift", "ALTER TABLE no_such ADD x INT"):
        run = dag.test(run_conf={"sql": sql, "reason": "r"})
        states = _states(run)
        assert states["preflight"] == "failed" and states["apply"] == "upstream_failed", (sql, states)
    run = dag.test(run_conf={"sql": "ALTER TABLE drift ADD x INT", "reason": "r", "zones": ["a", "zz"]})
    assert _states(run)["preflight"] == "failed"
    assert {z: definitions.read(mesh[z], [TABLE]) for z in ZONES} == before


def test_an_apply_killed_mid_way_leaves_the_zones_done_and_a_new_run_goes_on(mesh, zones, meta, dag):
    """kill -9 of the apply step while it waits for zone b's appliers (zone a changed, b not
    yet): a changed, b and c not; the DAG run afterwards skips a, changes b and c, and the
    holds drain with every row in every zone."""
    import signal

    from tests.support import schema_process
    from zonesync.apply.tools import progress

    sql = f"ALTER TABLE {TABLE} ADD COLUMN extra INT NULL"
    a, b = mesh["a"], mesh["b"]
    with writing(zones["a"]) as written:
        # every partition of a's stream running in b, then halted: b's wait for a cannot end
        wait_until(lambda: len(progress.applied_lsns(b, "a")) == 4, 30, "b applies every partition of a")
        assert len(progress.halt(b, "a", None, "test: hold b back from a's changes")) == 4
        proc = schema_process.spawn(meta, zones, sql, ["a", "b", "c"])
        try:
            lines = []
            for line in proc.stdout:
                lines.append(line.strip())
                if line.strip() == "waiting b":
                    break
            assert lines[-2:] == ["applied a", "waiting b"], lines
            proc.send_signal(signal.SIGKILL)  # mid-way: a changed, b waiting for a's changes
            proc.wait(10)
        finally:
            proc.kill()
        shapes = {z: definitions.read(mesh[z], [TABLE])[TABLE] for z in ZONES}
        assert "extra" in shapes["a"].columns and "extra" not in shapes["b"].columns | shapes["c"].columns
        progress.resume(b, "a")
        # (zones given: the module's DAG keeps the Params of the run before, dag.test())
        run = dag.test(run_conf={"sql": sql, "reason": "after a kill", "zones": list(ZONES)})
        assert run.state == "success", _states(run)
        assert run.get_task_instance("apply").xcom_pull(task_ids="apply")["a"] == "already"
        wait_until(lambda: not any(table_holds.holds(mesh[z]) for z in ZONES), 30, "the holds drained")
    wait_until(lambda: _rows(b) == _rows(a) == _rows(mesh["c"]), 30, "every zone has a's rows")
    assert len(_rows(a)) == len(written)
    shapes = {z: definitions.read(mesh[z], [TABLE]) for z in ZONES}
    assert definitions.diff(shapes) == [] and "extra" in shapes["c"][TABLE].columns
