"""spark-submit gets what a job needs from the worker's environment and its own
secrets, never Airflow's (issue: Spark gets every secret)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from zonesync import jvm

pytestmark = pytest.mark.unit

WORKER_ENV = {
    "PATH": "/usr/bin",
    "JAVA_HOME": "/usr/lib/jvm/java-17",
    "PYSPARK_PYTHON": "/venv/bin/python",
    "LC_ALL": "C.UTF-8",
    "ZONESYNC_STATE_DIR": "/state",
    "ZONESYNC_TOPIC_PREFIX": "staging.",
    "AIRFLOW__CORE__FERNET_KEY": "fernet",
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",
    "AIRFLOW_CONN_ZONESYNC_ZONE_A": "mysql://app:pw@a:3306/zonesync_app",
    "ZONESYNC_META_URL": "mysql://meta:pw@m:3306/zonesync_meta",
    "ZONESYNC_META_PASSWORD": "pw",
    "ZONESYNC_JDBC_PASSWORD_B": "left over",
    "AWS_SECRET_ACCESS_KEY": "aws",
}


def test_only_the_allowed_part_of_the_environment_and_the_jobs_own_secrets():
    env = jvm.submit_env(WORKER_ENV, {"ZONESYNC_JDBC_PASSWORD_A": "a-pw"})
    assert env == {
        "PATH": "/usr/bin",
        "JAVA_HOME": "/usr/lib/jvm/java-17",
        "PYSPARK_PYTHON": "/venv/bin/python",
        "LC_ALL": "C.UTF-8",
        "ZONESYNC_STATE_DIR": "/state",
        "ZONESYNC_TOPIC_PREFIX": "staging.",
        "ZONESYNC_JDBC_PASSWORD_A": "a-pw",
    }


def test_the_operators_hook_starts_spark_submit_with_exactly_that(tmp_path, monkeypatch):
    """The provider's hook starts spark-submit with the worker's whole environment plus
    env_vars; the operator's hook with env_vars alone (a stand-in spark-submit on PATH
    writes down the environment it got)."""
    from zonesync_airflow.operators.spark import _ExactEnvSubmitHook

    seen = tmp_path / "env.json"
    binary = tmp_path / "spark-submit"
    dump = f"import json, os; json.dump(dict(os.environ), open('{seen}', 'w'))"
    binary.write_text(f'#!/bin/sh\nexec python3 -c "{dump}"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ENV_TEST", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "fernet")
    env = jvm.submit_env({**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}, {"ZONESYNC_JDBC_PASSWORD_A": "a-pw"})
    hook = _ExactEnvSubmitHook(conn_id="spark_env_test", env_vars=env)
    hook.submit(str(tmp_path / "job.py"))
    got = json.loads(seen.read_text())
    assert got["ZONESYNC_JDBC_PASSWORD_A"] == "a-pw"
    assert not [k for k in got if k.startswith("AIRFLOW")], sorted(got)


def test_spark_results_never_go_to_a_shared_temporary_directory(tmp_path, monkeypatch):
    import stat

    from zonesync_airflow.operators.spark import output_dir

    monkeypatch.delenv("ZONESYNC_STATE_DIR", raising=False)
    with pytest.raises(ValueError, match="ZONESYNC_STATE_DIR is not set"):
        output_dir()
    monkeypatch.setenv("ZONESYNC_STATE_DIR", str(tmp_path))
    assert output_dir() == tmp_path / "spark-out"
    assert stat.S_IMODE((tmp_path / "spark-out").stat().st_mode) == 0o700


@pytest.mark.parametrize("master", ["yarn"])  # (k8s needs the kubernetes client to build its hook)
def test_masters_that_would_put_passwords_on_the_command_line_are_refused(monkeypatch, master):
    from zonesync_airflow.operators.spark import ZoneSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FAR", json.dumps({"conn_type": "spark", "host": master}))
    op = ZoneSparkSubmitOperator(task_id="t", application="job.py", zones="a", conn_id="spark_far")
    with pytest.raises(ValueError, match="spark_far: .*YARN and Kubernetes would put the zones' passwords"):
        op._get_hook()


def test_credential_like_settings_stay_behind():
    env = jvm.submit_env({"ZONESYNC_KAFKA_SASL_PASSWD": "x", "ZONESYNC_JAAS_CONFIG": "x", "JAVA_TOOL_OPTIONS": "-Dp=x",
                          "ZONESYNC_ZONES": "a,b"}, {})  # fmt: skip
    assert env == {"ZONESYNC_ZONES": "a,b"}
