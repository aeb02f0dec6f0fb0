"""Session fixtures: private zones, a private dev broker, Airflow's metadata DB, Spark.

Nothing here touches the machine's own MariaDB (3306) or a developer's running
`zonesync dev up`: the test session gets its own state dir under /tmp and its
own block of free ports, chosen before Airflow is imported so that Airflow's
configuration (home, SQLite file, connections) points into that state dir too.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from zonesync import config
from zonesync.dev import airflow_env, procs

REPO = Path(__file__).resolve().parents[1]
ZONES = "a,b,c"


def _make_test_config() -> config.EnvConfig:
    state = Path(tempfile.mkdtemp(prefix="zonesync-test-"))
    names = ZONES.split(",")
    base = procs.free_port_block(2 * len(names) + 2)  # meta, zones, Airflow, the zones' Redis
    return config.load(
        {
            "ZONESYNC_STATE_DIR": str(state),
            "ZONESYNC_ZONES": ZONES,
            "ZONESYNC_BASE_PORT": str(base),
            "ZONESYNC_AIRFLOW_PORT": str(base + len(names) + 1),
            "ZONESYNC_KV_BASE_PORT": str(base + len(names) + 1),  # zone i's Redis at kv base + i
            "ZONESYNC_KAFKA_PARTITIONS": "8",
            "ZONESYNC_WITH_AIRFLOW": "0",
            "ZONESYNC_WITH_WORKERS": "0",
        }
    )


TEST_CFG = _make_test_config()
# Before anything imports airflow: its config, DB and connections are the test env's.
os.environ.update(airflow_env.environment(TEST_CFG))
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["ZONESYNC_DEV"] = "1"  # zones and meta default to this session's (config.dev_selected)


def pytest_sessionfinish(session, exitstatus):
    from zonesync.dev import env

    env.down(TEST_CFG)
    if not os.environ.get("ZONESYNC_KEEP_TEST_STATE"):
        shutil.rmtree(TEST_CFG.state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def test_cfg() -> config.EnvConfig:
    return TEST_CFG


@pytest.fixture(scope="session")
def zones(test_cfg):
    """The meta store and zones a, b, c, running, with the sample schema loaded."""
    from zonesync.dev import env

    env.up_databases(test_cfg)
    env.up_meta(test_cfg)
    env.up_zone_bookkeeping(test_cfg)
    env.load_sample_schema(test_cfg)
    instances = {i.name.removeprefix("zone-"): i for i in env.instances(test_cfg)}
    yield instances


@pytest.fixture(scope="session")
def meta(zones, test_cfg):
    """The migrated meta store of the test env (zones a, b, c registered)."""
    from zonesync.dev import env

    return env.meta_config(test_cfg)


@pytest.fixture(scope="session")
def kv_stores(test_cfg):
    """Each zone's private redis-server (its KV repos): zone name -> dev.redis.RedisInstance."""
    from zonesync.dev import env

    env.up_kv(test_cfg)
    yield {z.name: inst for z, inst in zip(test_cfg.zones, env.kv_instances(test_cfg), strict=True)}


@pytest.fixture(scope="session")
def broker(test_cfg):
    """The dev broker (librdkafka mock cluster); returns its info (bootstrap, control_port)."""
    from zonesync.dev import broker as broker_mod
    from zonesync.dev import env

    env.up_broker(test_cfg)
    info = broker_mod.read_info(test_cfg.broker_file)
    assert info, "the dev broker did not write its bootstrap file"
    yield info


@pytest.fixture(scope="session")
def airflow_db(test_cfg):
    """An initialised Airflow metadata DB (SQLite in the test state dir) for dag.test()."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    yield test_cfg.airflow_home / "airflow.db"


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole run (tests/support/spark.py)."""
    from tests.support.spark import session as spark_session

    session = spark_session()
    yield session
    session.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # quiet its shutdown chatter
