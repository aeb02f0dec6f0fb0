"""The whole local stack on private ports, for end-to-end tests and benchmarks.

Zones, meta store, broker, a replicator and an applier per zone, and Airflow
(scheduler, triggerer, dag-processor, api-server), in a state directory of its
own, with the sample schema and examples/rules.yaml published: what `make demo`
runs, without touching the user's environment on the default ports.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from zonesync import config
from zonesync.config import EnvConfig
from zonesync.dev import demo, procs
from zonesync.dev import env as dev_env


def stack_env(root: Path) -> dict[str, str]:
    base = procs.free_port_block(9)  # meta, three zones; then the zones' Redis at base + 6..8
    return {
        "ZONESYNC_STATE_DIR": str(root),
        "ZONESYNC_BASE_PORT": str(base),
        "ZONESYNC_KV_BASE_PORT": str(base + 5),
        "ZONESYNC_AIRFLOW_PORT": str(procs.free_port()),
        "ZONESYNC_WITH_AIRFLOW": "1",
        "ZONESYNC_WITH_WORKERS": "1",
        # no hourly consistency check starting by itself in the middle of a test or bench
        "ZONESYNC_CHECK_SCHEDULE": os.environ.get("ZONESYNC_CHECK_SCHEDULE", "none"),
    }


@contextlib.contextmanager
def full_stack(root: Path, dags: tuple[str, ...] = ("zone_switch",)):
    """Yield (cfg, env vars for `zonesync` subprocesses, REST client); everything stops on exit."""
    env = stack_env(root)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    cfg: EnvConfig = config.load({**os.environ, **env})
    try:
        dev_env.up(cfg)
        dev_env.load_sample_schema(cfg)
        demo.publish_example_rules(cfg)
        api = demo.api_client(cfg)
        for dag_id in dags:
            api.wait_for_dag(dag_id)
        yield cfg, {**os.environ, **env}, api
    finally:
        dev_env.down(cfg)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
