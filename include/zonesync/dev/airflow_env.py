"""The local Airflow: its environment, its connections, its four processes.

Airflow reads this repo's airflow.cfg for the settings that do not depend on
where things live (executor, parallelism, auth manager); everything that does
(home, dags and plugins folders, the SQLite file, the API port, the secrets) is
passed as AIRFLOW__SECTION__KEY variables built here, so a test or a second
checkout runs its own Airflow without editing a file.

Connections are generated from the environment the same way
(AIRFLOW_CONN_<ID> as JSON), never stored in code: one per zone
(`zonesync_zone_<name>`), the meta store (`zonesync_meta`), the local Spark master
(`spark_local`) and the dev broker (`zonesync_kafka`). In production the same ids
are defined in Airflow's own connection store.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from zonesync.config import REPO_ROOT, EnvConfig
from zonesync.dev import procs

PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")
ADMIN_USER = "admin"
# and a read-only user, to try Airflow's roles on zonesync's HTTP API (docs/console.md)
VIEWER_USER = "viewer"


def venv_bin() -> Path:
    return Path(sys.executable).parent


def java_home() -> str | None:
    """A Java 17+ runtime for Spark: JAVA_HOME if it works, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return home
    java = shutil.which("java")
    if java:
        return str(Path(os.path.realpath(java)).parent.parent)
    return None


def spark_env(base: dict | None = None) -> dict:
    """Variables spark-submit and PySpark need, whoever launches them."""
    env = dict(os.environ if base is None else base)
    home = java_home()
    if home:
        env["JAVA_HOME"] = home
    env["PATH"] = f"{venv_bin()}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _secret(path: Path, nbytes: int = 32) -> str:
    """A per-environment secret, made once and kept 0600 in the state dir."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(nbytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value)
    return value


def _fernet_key(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    from cryptography.fernet import Fernet

    path.parent.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key().decode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    return key


def connections(cfg: EnvConfig) -> dict[str, dict]:
    """The Airflow connections of the local environment, by connection id."""
    conns: dict[str, dict] = {
        "zonesync_meta": {
            "conn_type": "mysql",
            "host": "127.0.0.1",
            "port": cfg.meta_port,
            "login": "root",
            "schema": "zonesync_meta",
        },
        "spark_local": {
            "conn_type": "spark",
            "host": "local[2]",
            "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"},
        },
        "zonesync_kafka": {
            "conn_type": "generic",
            "extra": {"bootstrap_file": str(cfg.broker_file)},
        },
    }
    for zone in cfg.zones:
        conns[f"zonesync_zone_{zone.name}"] = {
            "conn_type": "mysql",
            "host": "127.0.0.1",
            "port": zone.port,
            "login": "root",
            "schema": "zonesync_app",
            "extra": {"zone_id": zone.id, "zone_name": zone.name},
        }
        # the schema_change DAG's DDL (zs_schema in a deployment: docker/mariadb/roles.sql)
        conns[f"zonesync_schema_{zone.name}"] = {**conns[f"zonesync_zone_{zone.name}"]}
    return conns


def environment(cfg: EnvConfig, base: dict | None = None) -> dict:
    """The full process environment for every Airflow command of this env."""
    home = cfg.airflow_home
    env = spark_env(base)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW_CONFIG": str(REPO_ROOT / "airflow.cfg"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(cfg.airflow_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{cfg.airflow_port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{cfg.airflow_port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin,{VIEWER_USER}:viewer",
            "AIRFLOW__API_AUTH__JWT_SECRET": _secret(home / ".jwt_secret"),
            "AIRFLOW__API__SECRET_KEY": _secret(home / ".api_secret"),
            "AIRFLOW__CORE__FERNET_KEY": _fernet_key(home / ".fernet_key"),
            "ZONESYNC_STATE_DIR": str(cfg.state_dir),
            "ZONESYNC_ZONES": ",".join(z.name for z in cfg.zones),
            "ZONESYNC_BASE_PORT": str(cfg.meta_port),
            "ZONESYNC_KV_BASE_PORT": str(cfg.kv_base_port),
        }
    )
    for conn_id, conn in connections(cfg).items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
    return env


def _migration_stamp(cfg: EnvConfig) -> Path:
    return cfg.airflow_home / ".migrated"


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


def needs_migration(cfg: EnvConfig) -> bool:
    """Migrate once per Airflow version: `db migrate` costs seconds even when current."""
    stamp = _migration_stamp(cfg)
    db = cfg.airflow_home / "airflow.db"
    return not db.exists() or not stamp.exists() or stamp.read_text().strip() != _airflow_version()


def migrate_db(cfg: EnvConfig, env: dict) -> None:
    cfg.airflow_home.mkdir(parents=True, exist_ok=True)
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    with open(cfg.log_dir / "airflow-db-migrate.log", "ab") as log:
        result = subprocess.run(
            [str(venv_bin() / "airflow"), "db", "migrate"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            umask=procs.PRIVATE_UMASK,
        )
    if result.returncode != 0:
        raise RuntimeError(f"`airflow db migrate` failed: see {cfg.log_dir / 'airflow-db-migrate.log'}")
    _migration_stamp(cfg).write_text(_airflow_version())


def argv(process: str, cfg: EnvConfig) -> list[str]:
    airflow = str(venv_bin() / "airflow")
    if process == "api-server":
        return [airflow, "api-server", "--host", "127.0.0.1", "--port", str(cfg.airflow_port)]
    return [airflow, process]


def marker(process: str) -> str:
    # setproctitle turns `airflow api-server` into `airflow api_server -- ...`
    return f"airflow {process}|airflow {process.replace('-', '_')}"


def admin_password(cfg: EnvConfig) -> str | None:
    try:
        return json.loads((cfg.airflow_home / "passwords.json").read_text()).get(ADMIN_USER)
    except (FileNotFoundError, ValueError):
        return None


def health(cfg: EnvConfig, timeout: float = 10.0) -> dict | None:
    """Airflow's own health document (metadatabase, scheduler, triggerer, dag processor).
    The timeout is long: the api-server's one worker waits on SQLite's lock while a task
    starts (6 s seen right after `dev up`, when the hourly check's first run starts), and a
    busy api-server is not an unhealthy one."""
    url = f"http://127.0.0.1:{cfg.airflow_port}/api/v2/monitor/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
