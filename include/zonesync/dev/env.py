"""`zonesync dev up | down | status`: the local environment as one unit.

Components, in start order: the meta store, one mariadbd per zone, one
redis-server per zone (its KV repos), the dev broker, the workers, then Airflow
(db migrate, api-server, scheduler, dag-processor, triggerer). `up` is idempotent:
a component that runs and answers is left alone, one that crashed (pid file but no
process) is reported and started again, so `up` after a crash or a reboot heals the
environment. `down` stops every process
group it started, newest first, and waits for them to exit.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from zonesync.config import REPO_ROOT, EnvConfig
from zonesync.dev import airflow_env, broker, mariadb, procs
from zonesync.dev import redis as kv_redis

SAMPLE_SCHEMA = REPO_ROOT / "include" / "sql" / "sample_app.sql"


class EnvError(RuntimeError):
    """One line for the user: what is wrong and how to fix it."""


@dataclass
class ComponentStatus:
    name: str
    address: str
    pid: int | None
    health: str  # healthy | unhealthy | crashed | stopped | starting


def instances(cfg: EnvConfig) -> list[mariadb.Instance]:
    meta = mariadb.Instance("meta", cfg.meta_port, 1000, cfg.data_dir / "meta", gtid_domain_id=0)
    zones = [
        mariadb.Instance(z.instance, z.port, z.id, cfg.data_dir / z.instance, gtid_domain_id=z.id) for z in cfg.zones
    ]
    return [meta, *zones]


def kv_instances(cfg: EnvConfig) -> list[kv_redis.RedisInstance]:
    """Each zone's private redis-server: the zone's KV repos (runtime/kv_endpoint.py)."""
    return [kv_redis.RedisInstance(z.kv_instance, z.kv_port, cfg.data_dir / z.kv_instance) for z in cfg.zones]


def topics(cfg: EnvConfig) -> list[str]:
    return [f"zonesync.{z.name}.changes" for z in cfg.zones]


def _say(msg: str) -> None:
    print(msg, flush=True)


def preflight(cfg: EnvConfig) -> None:
    if cfg.with_airflow and airflow_env.java_home() is None:
        raise EnvError("no Java runtime found (Spark needs Java 17): run `make setup` or set JAVA_HOME")
    if not Path(mariadb.MARIADBD).exists():
        raise EnvError(f"{mariadb.MARIADBD} not found: run `make setup` (installs mariadb-server)")
    busy = []
    for inst in [*instances(cfg), *kv_instances(cfg)]:  # mariadbds and redis-servers: a name and a port each
        current = procs.read(cfg.run_dir, inst.name)
        if not (current and current.alive()) and not procs.port_free(inst.port):
            busy.append(f"{inst.port} ({inst.name})")
    if cfg.with_airflow:
        current = procs.read(cfg.run_dir, "api-server")
        if not (current and current.alive()) and not procs.port_free(cfg.airflow_port):
            busy.append(f"{cfg.airflow_port} (airflow api-server)")
    if busy:
        raise EnvError(
            f"port {', '.join(busy)} already in use by another process: stop it, or choose other ports "
            "with ZONESYNC_BASE_PORT / ZONESYNC_KV_BASE_PORT / ZONESYNC_AIRFLOW_PORT"
        )


def _report_crashed(cfg: EnvConfig, name: str) -> None:
    current = procs.read(cfg.run_dir, name)
    if current and not current.alive():
        _say(f"  {name}: crashed earlier (pid {current.pid} gone); restarting, log in {cfg.log_dir / (name + '.log')}")
        procs.pidfile(cfg.run_dir, name).unlink(missing_ok=True)


def up_databases(cfg: EnvConfig) -> None:
    procs.private_dir(cfg.state_dir)  # passwords and secrets live under it (0700)
    for inst in instances(cfg):
        _report_crashed(cfg, inst.name)
        mariadb.start(inst, cfg.run_dir, cfg.log_dir, cfg.data_dir)


def up_kv(cfg: EnvConfig) -> None:
    """Each zone's redis-server (idempotent: one that runs and answers is left alone)."""
    for inst in kv_instances(cfg):
        _report_crashed(cfg, inst.name)
        kv_redis.start(inst, cfg.run_dir, cfg.log_dir)


def up_meta(cfg: EnvConfig) -> None:
    """Bring the meta store schema up to date and register the zones (idempotent). Zones
    added to an environment that already has others are added fenced (copy/new_zone.py)."""
    from zonesync.meta import db
    from zonesync.meta.store import MetaStore

    meta = meta_config(cfg)
    db.migrate(meta)
    store = MetaStore(meta)
    known = store.zones()
    added = [z for z in cfg.zones if z.name not in known]
    if not known or not added:
        store.ensure_zones([(z.id, z.name) for z in cfg.zones], actor="zonesync dev up")
        return
    # A zone added to a running mesh (ZONESYNC_ZONES grew): fenced until its full copy
    from zonesync.copy.new_zone import add_zone

    by_name = {i.name: i for i in instances(cfg)}
    for z in added:
        add_zone(meta, z.name, by_name[f"zone-{z.name}"].connect, cfg.kafka_partitions, z.id)
        _say(f"zone {z.name} added, its appliers fenced until `zonesync copy --from <zone> --to {z.name} "
             f"--mode add-zone --reason ...`")  # fmt: skip


def meta_config(cfg: EnvConfig):
    from zonesync.meta.db import MetaConfig

    return MetaConfig("127.0.0.1", cfg.meta_port, "root", "", "zonesync_meta")


def up_broker(cfg: EnvConfig) -> None:
    _report_crashed(cfg, "broker")
    current = procs.read(cfg.run_dir, "broker")
    if current and current.alive():
        info = broker.read_info(cfg.broker_file)
        if info:
            for topic in topics(cfg):  # idempotent: topics exist or are made
                broker.create_topic(cfg.broker_file, topic, cfg.kafka_partitions)
            return
        procs.stop(cfg.run_dir, "broker")
    cfg.broker_file.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "zonesync.cli",
        "dev",
        "broker",
        "--info-file",
        str(cfg.broker_file),
        "--partitions",
        str(cfg.kafka_partitions),
        *topics(cfg),
    ]
    managed = procs.spawn(cfg.run_dir, cfg.log_dir, "broker", argv, f"--info-file {cfg.broker_file}")
    if not procs.wait_until(lambda: broker.read_info(cfg.broker_file) is not None, 30, 0.1):
        alive = managed.alive()
        procs.stop(cfg.run_dir, "broker")
        state = "still starting" if alive else "exited"
        raise EnvError(f"the dev broker did not start ({state}): see {cfg.log_dir / 'broker.log'}")


WORKER_COMMANDS = {"replicator": "replicate", "applier": "apply", "tagger": "tag", "kvtagger": "tag-kv"}


def worker_names(cfg: EnvConfig) -> list[str]:
    return [f"{kind}-{z.name}" for z in cfg.zones for kind in WORKER_COMMANDS]


def up_workers(cfg: EnvConfig) -> None:
    """One replicator, one applier, one tagger and one KV tagger per zone, each its own
    process group."""
    env = dict(os.environ)
    env.update(
        {
            "ZONESYNC_STATE_DIR": str(cfg.state_dir),
            "ZONESYNC_ZONES": ",".join(z.name for z in cfg.zones),
            "ZONESYNC_BASE_PORT": str(cfg.meta_port),
            "ZONESYNC_KV_BASE_PORT": str(cfg.kv_base_port),
            "ZONESYNC_KAFKA_PARTITIONS": str(cfg.kafka_partitions),
            "ZONESYNC_DEV": "1",  # their zones and meta are this environment's (config.dev_selected)
        }
    )
    for name in worker_names(cfg):
        _report_crashed(cfg, name)
        current = procs.read(cfg.run_dir, name)
        if current and current.alive():
            continue
        kind, zone = name.split("-", 1)
        command = WORKER_COMMANDS[kind]
        argv = [sys.executable, "-m", "zonesync.cli", command, "--zone", zone]
        procs.spawn(cfg.run_dir, cfg.log_dir, name, argv, f"{command} --zone {zone}", env=env)
    _wait_replicators_positioned(cfg)


def _wait_replicators_positioned(cfg: EnvConfig, timeout: float = 60.0) -> None:
    """Return once every replicator recorded where it reads from: writes after this are captured."""
    from zonesync.capture.checkpoints import CheckpointStore

    deadline = time.monotonic() + timeout
    for zone in cfg.zones:
        store = CheckpointStore(meta_config(cfg), zone.name)
        try:
            while store.latest() is None:
                current = procs.read(cfg.run_dir, f"replicator-{zone.name}")
                if current is None or not current.alive() or time.monotonic() > deadline:
                    raise EnvError(
                        f"replicator-{zone.name} did not take its binlog position: see "
                        f"{cfg.log_dir / f'replicator-{zone.name}.log'}"
                    )
                time.sleep(0.1)
        finally:
            store.close()


def up_airflow(cfg: EnvConfig) -> None:
    env = airflow_env.environment(cfg)
    if airflow_env.needs_migration(cfg):
        _say("  airflow: migrating the metadata DB")
        airflow_env.migrate_db(cfg, env)
    running: dict[str, procs.Managed] = {}
    for process in airflow_env.PROCESSES:
        _report_crashed(cfg, process)
        current = procs.read(cfg.run_dir, process)
        if current and current.alive():
            running[process] = current
            continue
        running[process] = procs.spawn(
            cfg.run_dir,
            cfg.log_dir,
            process,
            airflow_env.argv(process, cfg),
            airflow_env.marker(process),
            env=env,
            cwd=cfg.airflow_home,
        )
    if not procs.wait_until(lambda: _airflow_ready(cfg, running), 240, 1.0):
        raise EnvError(f"Airflow did not become healthy within 240 s: see {cfg.log_dir}/api-server.log and friends")


def _airflow_ready(cfg: EnvConfig, running: dict[str, procs.Managed]) -> bool:
    doc = airflow_env.health(cfg)
    if not doc:
        for process, current in running.items():
            if not current.alive():
                what = procs.describe(current.pid)
                raise EnvError(
                    f"airflow {process} exited during start-up ({what}): see {cfg.log_dir / (process + '.log')}"
                )
        return False
    return _all_healthy(doc)


def _all_healthy(doc: dict) -> bool:
    """Whether Airflow's health document says every part we run is healthy."""
    parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all((doc.get(p) or {}).get("status") == "healthy" for p in parts)


ZONE_BOOKKEEPING = REPO_ROOT / "include" / "sql" / "zone"


def _run_sql_file(inst: mariadb.Instance, path: Path) -> None:
    from zonesync.copy.new_zone import run_sql_file

    conn = inst.connect()
    try:
        run_sql_file(conn, path)
    finally:
        conn.close()


def up_zone_bookkeeping(cfg: EnvConfig) -> None:
    """The `zonesync` database in every zone: apply state, tombstones, row locks (idempotent)."""
    for inst in instances(cfg)[1:]:
        for path in sorted(ZONE_BOOKKEEPING.glob("*.sql")):
            _run_sql_file(inst, path)


def load_sample_schema(cfg: EnvConfig) -> None:
    """Load include/sql/sample_app.sql into every zone (idempotent DDL)."""
    for inst in instances(cfg)[1:]:
        _run_sql_file(inst, SAMPLE_SCHEMA)


def up(cfg: EnvConfig) -> None:
    procs.private_dir(cfg.state_dir)
    preflight(cfg)
    started = time.monotonic()
    _say(f"zonesync dev up: state in {cfg.state_dir}")
    up_databases(cfg)
    up_kv(cfg)
    up_meta(cfg)
    up_zone_bookkeeping(cfg)
    up_broker(cfg)
    if cfg.with_workers:
        up_workers(cfg)
    if cfg.with_airflow:
        up_airflow(cfg)
    _say(f"up in {time.monotonic() - started:.1f} s")


def down(cfg: EnvConfig) -> list[str]:
    """Stop everything this env started, newest first; return what was running."""
    names = [
        *reversed(airflow_env.PROCESSES),
        *worker_names(cfg),
        "broker",
        *[i.name for i in reversed(kv_instances(cfg))],
        *[f"zone-{z.name}-replica" for z in cfg.zones],  # (dev/replica.py: started on demand)
        *[i.name for i in reversed(instances(cfg))],
    ]
    stopped = []
    for name in names:
        if procs.stop(cfg.run_dir, name, timeout=30):
            stopped.append(name)
    cfg.broker_file.unlink(missing_ok=True)
    return stopped


def status(cfg: EnvConfig) -> list[ComponentStatus]:
    rows: list[ComponentStatus] = []
    for inst in instances(cfg):
        rows.append(_status_of(cfg, inst.name, f"127.0.0.1:{inst.port}", lambda inst=inst: mariadb.ping(inst)))
    for kv in kv_instances(cfg):
        rows.append(_status_of(cfg, kv.name, f"127.0.0.1:{kv.port}", lambda kv=kv: kv_redis.ping(kv)))
    info = broker.read_info(cfg.broker_file)
    address = info["bootstrap"] if info else "-"

    def broker_ok() -> bool:
        try:
            return info is not None and bool(broker.request(info["control_port"], "PING", timeout=2))
        except (OSError, broker.BrokerError):
            return False

    rows.append(_status_of(cfg, "broker", address, broker_ok))
    if cfg.with_workers or any(procs.read(cfg.run_dir, n) for n in worker_names(cfg)):
        for name in worker_names(cfg):
            rows.append(_status_of(cfg, name, "-", lambda: True))
    if cfg.with_airflow or any(procs.read(cfg.run_dir, p) for p in airflow_env.PROCESSES):
        doc = _settled_airflow_health(cfg)
        keys = {
            "api-server": "metadatabase",
            "scheduler": "scheduler",
            "dag-processor": "dag_processor",
            "triggerer": "triggerer",
        }
        for process in airflow_env.PROCESSES:
            addr = f"http://127.0.0.1:{cfg.airflow_port}" if process == "api-server" else "-"
            rows.append(
                _status_of(cfg, process, addr, lambda p=process: (doc.get(keys[p]) or {}).get("status") == "healthy")
            )
    return rows


def _settled_airflow_health(cfg: EnvConfig, grace_s: float = 45.0) -> dict:
    """Airflow's health document, asked again for up to `grace_s` while its processes are
    alive but the document is missing or names a part unhealthy. On 2 busy cores the
    api-server can miss one probe, and a scheduler's heartbeat can be late once, right
    after `dev up`; a status that says "unhealthy" for a moment's stall is a wrong answer.
    A dead process is not waited for: it shows as crashed at once."""
    deadline = time.monotonic() + grace_s
    while True:
        doc = airflow_env.health(cfg) or {}
        if _all_healthy(doc):
            return doc
        alive = [procs.read(cfg.run_dir, p) for p in airflow_env.PROCESSES]
        if time.monotonic() >= deadline or not all(m is not None and m.alive() for m in alive):
            return doc
        time.sleep(1.0)


def _status_of(cfg: EnvConfig, name: str, address: str, healthy) -> ComponentStatus:
    current = procs.read(cfg.run_dir, name)
    if current is None:
        return ComponentStatus(name, address, None, "stopped")
    if not current.alive():
        return ComponentStatus(name, address, current.pid, "crashed")
    return ComponentStatus(name, address, current.pid, "healthy" if healthy() else "unhealthy")


def format_status(rows: list[ComponentStatus]) -> str:
    lines = [f"{'component':<15} {'address':<28} {'pid':>8}  health"]
    for r in rows:
        lines.append(f"{r.name:<15} {r.address:<28} {str(r.pid or '-'):>8}  {r.health}")
    return "\n".join(lines)


def wipe(cfg: EnvConfig) -> None:
    """Remove the state dir of a stopped environment (`zonesync dev down --wipe`)."""
    if cfg.state_dir.exists():
        shutil.rmtree(cfg.state_dir)
