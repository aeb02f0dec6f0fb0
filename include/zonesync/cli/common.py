"""What every `zonesync` command module shares: one-line errors, the meta store and the
zones of this process's settings, and output helpers. Command modules import this one and
the domain core, never each other.

Addresses come from the environment (runtime.endpoints.zone_endpoint, MetaConfig.from_env):
a missing one is a ConfigError line unless the dev environment is selected.
"""

from __future__ import annotations

import sys


def fail(message: str, prefix: str = "zonesync") -> int:
    """A user-fixable error: one line on stderr naming what is wrong and the fix; exit code 2."""
    print(f"{prefix}: {message}", file=sys.stderr)
    return 2


def flag_error(refused: Exception, flags: dict[str, str]) -> str:
    """A request's "field: why" as "--flag: why" (the flag is --field with dashes, unless
    `flags` names it)."""
    field, _, why = str(refused).partition(": ")
    return f"{flags.get(field, '--' + field.replace('_', '-'))}: {why}"


def host_port(text: str) -> tuple[str, int] | None:
    """'10.0.0.7:3306' -> ('10.0.0.7', 3306); None when it is not HOST:PORT."""
    host, sep, port = text.rpartition(":")
    return (host, int(port)) if sep and host and port.isdigit() and 0 < int(port) < 65536 else None


def meta():
    """The meta store (ZONESYNC_META_URL)."""
    from zonesync.meta.db import MetaConfig

    return MetaConfig.from_env()


def zone_endpoint(zone: str):
    """Zone `zone`'s database (ZONESYNC_ZONE_<NAME>_URL) as a runtime Endpoint."""
    from zonesync.runtime.endpoints import zone_endpoint as resolve

    return resolve(zone)


def primary_endpoint(zone: str):
    """Zone `zone`'s primary now: its URL's account at the address of its last promotion
    (`zonesync zones set-primary`, capture/segments.py), else the URL as it is."""
    from zonesync.console.access import primary_endpoint as resolve

    return resolve(zone)


def zone_conn(zone: str):
    """A new connection to a zone's database: UTC, not autocommit (console/access.py)."""
    from zonesync.console.access import zone_conn as connect

    return connect(zone)


def zone_writer(zone: str):
    """The applier's writer on a zone's database (console/access.py)."""
    from zonesync.console.access import zone_writer as writer

    return writer(zone)


def zone_names() -> list[str]:
    """The zones of this process's settings (ZONESYNC_ZONES), in id order."""
    from zonesync import config

    return [z.name for z in config.load().zones]


def numbers(values) -> str:
    """1, 2, 3: partitions and ids in messages."""
    return ", ".join(map(str, values))


def run_dag(dag_id: str, conf: dict, what: str, timeout: float, no_follow: bool, prefix: str, width: int = 14):
    """Trigger a DAG run through Airflow's REST API and follow it, printing each task as it
    moves; (run id, final state), or (None, message) when it could not be triggered. With
    `no_follow`: (run id, None) once triggered. `what` names the run on its first line."""
    from zonesync import config
    from zonesync.airflow_api import AirflowApiError
    from zonesync.dev.demo import api_client

    api = api_client(config.load())
    try:
        run = api.trigger(dag_id, conf)
    except AirflowApiError as exc:
        return None, str(exc)
    run_id = run["dag_run_id"]
    print(f"{prefix} {run_id}: {what}")
    if no_follow:
        print(f"follow it with `zonesync {prefix} status {run_id}` or in the Airflow UI")
        return run_id, None

    def show(task_id: str, state: str) -> None:
        # tasks that wait at a gate or reschedule between looks (a sensor) are not news
        if state not in ("none", "scheduled", "queued", "up_for_reschedule"):
            print(f"  {task_id:<{width}} {state}", flush=True)

    return run_id, api.follow(dag_id, run_id, timeout=timeout, on_change=show)
