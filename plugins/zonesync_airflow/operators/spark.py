"""ZoneSparkSubmitOperator: a Spark job that reads or writes zone databases.

It resolves each zone's Airflow connection when the task runs (never at DAG
import), passes the JDBC URL and user as arguments and the password as an
environment variable of spark-submit only, so no secret reaches a command line
or a log. Every job receives `--output PATH`, a per-run file it writes its
result to; the operator returns that path as its XCom so a downstream task can
read the result.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from zonesync import jvm
from zonesync_airflow.hooks.zone import ZoneHook

CHECK_JOB = str(Path(__file__).resolve().parents[3] / "spark_jobs" / "consistency_check.py")
COPY_JOB = str(Path(__file__).resolve().parents[3] / "spark_jobs" / "full_copy.py")


def password_env_var(zone: str) -> str:
    return f"ZONESYNC_JDBC_PASSWORD_{zone.upper()}"


def output_dir() -> Path:
    """Where Spark jobs write their results: <ZONESYNC_STATE_DIR>/spark-out, 0700. Never a
    shared temporary directory: a result names zones, tables and keys, and another user
    could plant one a later task would read."""
    base = os.environ.get("ZONESYNC_STATE_DIR")
    if not base:
        raise ValueError("ZONESYNC_STATE_DIR is not set: set it to a directory private to the Airflow workers "
                         "(the compose image sets /opt/airflow/zonesync-state)")  # fmt: skip
    out = Path(base) / "spark-out"
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    out.chmod(0o700)  # also when it existed wider
    return out


class _ExactEnvSubmitHook(SparkSubmitHook):
    """SparkSubmitHook whose spark-submit gets exactly its env_vars: the provider's hook
    starts it with the worker's whole environment and env_vars on top."""

    def _build_spark_submit_command(self, application: str) -> list[str]:
        command = super()._build_spark_submit_command(application)
        self._env = None  # set by the command's build; submit() would add os.environ to it
        return command

    def submit(self, application: str = "", **kwargs):
        return super().submit(application, env=dict(self._env_vars or {}), **kwargs)


class ZoneSparkSubmitOperator(SparkSubmitOperator):
    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "zones")

    def __init__(
        self,
        *,
        zones: Sequence[str] | str,
        conn_id: str = "spark_local",
        meta_conn_id: str | None = None,
        skip_without: str | None = None,
        **kwargs,
    ) -> None:
        """`meta_conn_id`: also pass the meta store (`--meta URL`, its password in the
        environment), for jobs that read it. `skip_without`: a flag of application_args
        whose rendered value, when empty, skips the task (nothing to do: no Spark started)."""
        kwargs.setdefault("jars", jvm.jars_option())
        kwargs.setdefault("driver_class_path", jvm.class_path())
        kwargs["conf"] = {**jvm.driver_conf(), **(kwargs.get("conf") or {})}  # the driver's class-data archive
        super().__init__(conn_id=conn_id, **kwargs)
        self.zones = zones
        self.meta_conn_id = meta_conn_id
        self.skip_without = skip_without

    def execute(self, context):
        if self.skip_without:
            args = list(self.application_args or [])
            at = args.index(self.skip_without) if self.skip_without in args else -1
            if at < 0 or at + 1 >= len(args) or not str(args[at + 1]).strip():
                from airflow.sdk.exceptions import AirflowSkipException

                raise AirflowSkipException(f"{self.skip_without} is empty: nothing to do")
        zones = self.zones.split(",") if isinstance(self.zones, str) else list(self.zones)
        if not zones:
            raise ValueError("zones is empty: name at least one zone whose connection zonesync_zone_<name> exists")
        run_id = context["run_id"].replace(":", "_").replace("+", "_")
        out = output_dir() / self.dag_id / f"{run_id}.{self.task_id}.json"
        out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        args = list(self.application_args or [])
        env = dict(self.env_vars or {})
        for zone in zones:
            ep = ZoneHook.for_zone(zone).endpoint()
            args += ["--zone", f"{ep.name}={ep.jdbc_url()}", "--zone-user", f"{ep.name}={ep.user}"]
            env[password_env_var(ep.name)] = ep.password
        if self.meta_conn_id:
            from zonesync_airflow.hooks.meta import ZonesyncMetaHook

            meta = ZonesyncMetaHook(self.meta_conn_id).meta_config()
            user = urllib.parse.quote(meta.user)
            args += ["--meta", f"mysql://{user}@{meta.host}:{meta.port}/{meta.database}"]
            env["ZONESYNC_META_PASSWORD"] = meta.password
        args += ["--output", str(out)]
        self.application_args = args
        # spark-submit needs JAVA_HOME, PATH and PYSPARK_PYTHON from the worker's environment,
        # and none of Airflow's secrets (jvm.submit_env)
        self.env_vars = jvm.submit_env(os.environ, env)
        self._hook = None
        super().execute(context)
        return str(out)

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        if hook._is_yarn or hook._is_kubernetes:
            # the provider passes env_vars to those masters as --conf arguments: the zones'
            # passwords would be on spark-submit's command line
            raise ValueError(
                f"connection {self._conn_id}: zonesync's Spark jobs run on a standalone master or local mode; "
                "YARN and Kubernetes would put the zones' passwords on the command line"
            )
        hook.__class__ = _ExactEnvSubmitHook  # the same hook, started with env_vars only
        return hook


def restricted_check(task_id: str, name: str, started_task: str = "verify_start", extra_args=(), **kwargs):
    """The consistency check's Spark job over a check run that `started_task` started (its
    XCom: check_run_id, zones, tables): the verify of a zone switch and of a migration
    (skipped when the tables are empty: a plan2 migration checks with writes stopped)."""
    started = f"ti.xcom_pull(task_ids='{started_task}')"
    return ZoneSparkSubmitOperator(
        task_id=task_id,
        application=CHECK_JOB,
        zones=f"{{{{ {started}['zones'] }}}}",
        application_args=[
            "--run-id",
            f"{{{{ {started}['check_run_id'] }}}}",
            "--table",
            f"{{{{ {started}['tables'] }}}}",
            *extra_args,
        ],  # fmt: skip
        meta_conn_id="zonesync_meta",
        skip_without="--table",
        name=name,
        driver_memory="512m",
        conf=jvm.driver_conf(dispatch_only=True),
        **kwargs,
    )


def stock_copy(task_id: str, name: str, started_task: str = "admit", **kwargs):
    """A migration's stock copy: the full copy's Spark job over the tables and entity
    predicates `started_task` returned (its XCom: run_id, source, target, zones, tables,
    where); skipped when no resident table moves."""
    started = f"ti.xcom_pull(task_ids='{started_task}')"
    return ZoneSparkSubmitOperator(
        task_id=task_id,
        application=COPY_JOB,
        zones=f"{{{{ {started}['zones'] }}}}",
        application_args=[
            "--run-id",
            f"{{{{ {started}['run_id'] }}}}",
            "--source",
            f"{{{{ {started}['source'] }}}}",
            "--target",
            f"{{{{ {started}['target'] }}}}",
            "--where-json",
            f"{{{{ {started}['where'] }}}}",
            "--parallel",
            "4",
            "--chunk-rows",
            "{{ params.stock_chunk_rows }}",
            "--table",
            f"{{{{ {started}['tables'] }}}}",
        ],  # fmt: skip
        skip_without="--table",
        name=name,
        driver_memory="512m",
        **kwargs,
    )
