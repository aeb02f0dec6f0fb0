"""One private redis-server per zone: the zone's KV repos (docs/kv.md), each repo a
logical database of it (ZONESYNC_KV_REPOS).

Like the private mariadbds: its own port on 127.0.0.1, its own directory, never the
machine's Redis on 6379. Durability is the append-only file (snapshots off: the AOF is
the record) with Redis's default `appendfsync everysec`: Redis write()s a command to the
AOF before it replies, so a kill -9 of the server loses no write that returned (tested),
and a crash of the machine loses at most the last second. A KV write and its change-log
entry are one script (one MULTI in the AOF), so whatever is lost is lost together.
`always` (an fsync per write) measured 2.3-2.7k plain SETs/s from one client here,
everysec 7.3-9.6k (docs/kv.md).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from zonesync.dev import procs

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisError(RuntimeError):
    pass


@dataclass(frozen=True)
class RedisInstance:
    name: str  # kv-<zone>
    port: int
    datadir: Path

    @property
    def marker(self) -> str:
        # redis-server retitles itself "redis-server 127.0.0.1:PORT": either form is ours
        return f"--port {self.port} |127.0.0.1:{self.port}"

    def client(self, db: int = 0):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=db, socket_timeout=5, socket_connect_timeout=5)


def ping(inst: RedisInstance) -> bool:
    import redis

    try:
        return bool(inst.client().ping())
    except (redis.RedisError, OSError):
        return False


def argv(inst: RedisInstance) -> list[str]:
    return [REDIS_SERVER, "--port", str(inst.port), "--bind", "127.0.0.1", "--dir", str(inst.datadir),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
            "--databases", "16", "--protected-mode", "yes"]  # fmt: skip


def start(inst: RedisInstance, run_dir: Path, log_dir: Path, timeout: float = 20.0) -> None:
    """Start the instance unless it runs and answers (idempotent); wait until it answers."""
    current = procs.read(run_dir, inst.name)
    if current and current.alive() and ping(inst):
        return
    if current and current.alive():
        procs.stop(run_dir, inst.name)
    if not Path(REDIS_SERVER).exists():
        raise RedisError(f"{REDIS_SERVER} not found: run `make setup` (installs redis-server)")
    procs.wait_until(lambda: procs.port_free(inst.port), 5, 0.05)  # a killed server's socket may linger a moment
    procs.require_free_port(inst.port, inst.name, "ZONESYNC_KV_BASE_PORT")
    procs.private_dir(inst.datadir)
    managed = procs.spawn(run_dir, log_dir, inst.name, argv(inst), inst.marker)
    if not procs.wait_until(lambda: ping(inst), timeout, 0.05):
        state = "still starting" if managed.alive() else "exited"
        procs.stop(run_dir, inst.name)
        log = log_dir / f"{inst.name}.log"
        raise RedisError(f"{inst.name} did not start on port {inst.port} ({state}): see {log}")
