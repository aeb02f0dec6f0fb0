"""One private mariadbd: its own datadir, port, socket, server_id and binlog.

Zones and the meta store each get one. The binlog settings are the ones change
capture depends on and are not negotiable: ROW format, FULL row image (the
applier's data-lock check compares the old row), FULL row metadata (column names
in the binlog, so capture needs no schema lookups), no binlog compression
(pymysqlreplication cannot read compressed events).

Bootstrapping a datadir with mariadb-install-db takes seconds, so the first one
becomes a template and every other instance starts from a copy of it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pymysql

from zonesync.dev import procs

log = logging.getLogger("zonesync.dev.mariadb")
MARIADBD = "/usr/sbin/mariadbd"
ZONE_ID_SPACE = 16  # zone ids 1..16: the step of every zone's AUTO_INCREMENT
INSTALL_DB = "/usr/bin/mariadb-install-db"


class MariaDBError(RuntimeError):
    pass


@dataclass(frozen=True)
class Instance:
    name: str
    port: int
    server_id: int
    datadir: Path
    gtid_domain_id: int = 0
    user: str = "root"
    # The server's own time zone, as a zone abroad runs it: `default_time_zone` is
    # --default-time-zone (e.g. "+08:00"; None leaves it SYSTEM), `tz` the TZ environment
    # variable mariadbd starts with (e.g. "America/New_York": SYSTEM then follows its DST).
    default_time_zone: str | None = None
    tz: str | None = None
    extra_args: tuple[str, ...] = ()  # e.g. a replica's --log-slave-updates (dev/replica.py)

    @property
    def socket(self) -> Path:
        return self.datadir / "mysqld.sock"

    @property
    def tmpdir(self) -> Path:
        """The server's own temporary directory, beside its datadir (not in it: a directory
        there is a database), never the machine's /tmp shared with everything else."""
        return self.datadir.with_name(self.datadir.name + ".tmp")

    @property
    def marker(self) -> str:
        return f"--datadir={self.datadir}"

    def argv(self) -> list[str]:
        d = self.datadir
        return [
            MARIADBD,
            "--no-defaults",
            f"--datadir={d}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket}",
            f"--pid-file={d / 'mysqld.pid'}",
            f"--log-error={d / 'error.log'}",
            f"--tmpdir={self.tmpdir}",
            "--user=root",
            f"--server-id={self.server_id}",
            f"--gtid-domain-id={self.gtid_domain_id}",
            f"--log-bin={d / 'binlog'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            "--log-bin-compress=OFF",
            "--binlog-expire-logs-seconds=0",  # never the server's own purge: safe-purge only (S001-08)
            "--local-infile=1",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_bin",
            "--innodb-buffer-pool-size=128M",
            "--innodb-log-file-size=64M",
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--max-connections=300",
            "--performance-schema=OFF",
            *([f"--default-time-zone={self.default_time_zone}"] if self.default_time_zone else []),
            # A zone (domain id = zone id) hands out AUTO_INCREMENT and sequence values no other
            # zone does (seed S002-14; docs/table-contract.md rule 5): id = zone id + k * 16.
            *(
                [f"--auto-increment-increment={ZONE_ID_SPACE}", f"--auto-increment-offset={self.gtid_domain_id}"]
                if 0 < self.gtid_domain_id <= ZONE_ID_SPACE
                else []
            ),
            *self.extra_args,
        ]

    def environment(self) -> dict | None:
        """mariadbd's environment: this process's, with TZ when the instance sets one."""
        return None if self.tz is None else {**os.environ, "TZ": self.tz}

    def connect(self, database: str | None = None, **kw) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password="",
            database=database,
            autocommit=True,
            **kw,
        )

    def url(self, database: str = "") -> str:
        return f"mysql://{self.user}@127.0.0.1:{self.port}/{database}"

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:mysql://127.0.0.1:{self.port}/{database}"


def _bootstrap(datadir: Path, log: Path) -> None:
    datadir.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        result = subprocess.run(
            [
                INSTALL_DB,
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    if result.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]  # (a test's log dir goes with it)
        raise MariaDBError(f"mariadb-install-db failed for {datadir} (exit {result.returncode}): see {log}: {tail}")


def ensure_datadir(instance: Instance, template_root: Path, log_dir: Path) -> None:
    """Create the instance's datadir from a bootstrapped template (made once)."""
    if (instance.datadir / "mysql").is_dir():
        return
    if not Path(MARIADBD).exists():
        raise MariaDBError(f"{MARIADBD} not found: run `make setup` (installs mariadb-server)")
    template = template_root / "template"
    if not (template / "mysql").is_dir():
        tmp = template_root / "template.partial"
        log_dir.mkdir(parents=True, exist_ok=True)
        for attempt in (1, 2):  # (seen once on a loaded machine: a failed first bootstrap, log lost)
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                _bootstrap(tmp, log_dir / "mariadb-install-db.log")
                break
            except MariaDBError as exc:
                if attempt == 2:
                    raise
                log.warning("%s: trying once more", exc)
        tmp.rename(template)
    if instance.datadir.exists():
        shutil.rmtree(instance.datadir)
    shutil.copytree(template, instance.datadir, symlinks=True)


def ping(instance: Instance) -> bool:
    try:
        conn = instance.connect(connect_timeout=1)
    except pymysql.err.OperationalError:
        return False
    conn.close()
    return True


def start(instance: Instance, run_dir: Path, log_dir: Path, template_root: Path) -> procs.Managed:
    """Start the instance unless it already runs; return when it answers queries."""
    current = procs.read(run_dir, instance.name)
    if current and current.alive():
        if not procs.wait_until(lambda: ping(instance), 30):
            raise MariaDBError(f"{instance.name} runs (pid {current.pid}) but does not answer on {instance.port}")
        return current
    procs.require_free_port(instance.port, instance.name, "ZONESYNC_BASE_PORT")
    ensure_datadir(instance, template_root, log_dir)
    instance.tmpdir.mkdir(parents=True, exist_ok=True)
    # A crashed run leaves its pid file and socket; mariadbd recovers the data itself.
    for leftover in (instance.socket, instance.datadir / "mysqld.pid"):
        leftover.unlink(missing_ok=True)
    managed = procs.spawn(run_dir, log_dir, instance.name, instance.argv(), instance.marker, env=instance.environment())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ping(instance):
            return managed
        if not managed.alive():
            tail = _tail(instance.datadir / "error.log")
            raise MariaDBError(f"{instance.name} exited during start-up; last lines of its error log:\n{tail}")
        time.sleep(0.1)
    raise MariaDBError(f"{instance.name} did not answer on port {instance.port} within 60 s")


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no error log)"
