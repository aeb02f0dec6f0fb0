"""Supervising the local processes: start in their own process group, find, stop.

Every component of the dev environment (a mariadbd, the broker, each Airflow
process) is started with `start_new_session=True`, so it leads its own process
group. `down` signals the whole group, which takes the children too (Airflow's
api-server forks workers, the scheduler forks task runners, spark-submit starts a
JVM) and waits until none of them is left.

The pid file records the pid and a marker that must appear in the process's
command line. A pid file left by a crashed run whose pid was reused by an
unrelated process is therefore recognised as stale, never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


class PortInUse(RuntimeError):
    pass


@dataclass
class Managed:
    name: str
    pid: int
    marker: str
    # Set when this process started it: then the kernel's word (waitpid) decides.
    proc: subprocess.Popen | None = None

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_matches(self.pid, self.marker)


def pid_matches(pid: int, marker: str) -> bool:
    """True when `pid` runs and its command line contains `marker` (or one of its |-separated forms).

    Processes may retitle themselves (Airflow's api-server shows `airflow api_server`), hence the forms.
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and any(alt in cmdline for alt in marker.split("|"))


def describe(pid: int) -> str:
    """What /proc says about a pid, for error messages."""
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return f"pid {pid} state {state}: {cmd[:120]}"
    except (OSError, IndexError):
        return f"pid {pid} is gone"


def pidfile(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.json"


def read(run_dir: Path, name: str) -> Managed | None:
    path = pidfile(run_dir, name)
    try:
        data = json.loads(path.read_text())
        return Managed(name=name, pid=int(data["pid"]), marker=str(data["marker"]))
    except (FileNotFoundError, ValueError, KeyError):
        return None


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _ephemeral_low(default: int = 32768) -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def free_port() -> int:
    """A free port for a listener started a little later (see free_port_block)."""
    return free_port_block(1)


def free_port_block(count: int, lo: int = 20000, hi: int | None = None) -> int:
    """The first port of `count` consecutive free ports (for private test/bench envs).

    Chosen below the kernel's ephemeral range (ip_local_port_range, 32768+ here): a
    port is picked now and bound seconds later (a server's start-up), and in between
    any outgoing connection or port-0 listener (the dev broker's) may be handed an
    ephemeral port. One such collision made Airflow's API server fail to bind.
    """
    import random

    hi = min(hi or 65535, _ephemeral_low())
    if hi - count <= lo:  # an ephemeral range that starts low: nothing below it to use
        hi = 60000
    for _ in range(200):
        base = random.randrange(lo, hi - count)
        if all(port_free(base + i) for i in range(count)):
            return base
    raise PortInUse(f"no block of {count} free ports found between {lo} and {hi}")


def require_free_port(port: int, what: str, env_var: str) -> None:
    if not port_free(port):
        raise PortInUse(
            f"port {port} ({what}) is already in use by another process: "
            f"stop that process or set {env_var} to a free port"
        )


PRIVATE_UMASK = 0o077  # what dev processes write is readable by their owner only


def private_dir(path: Path) -> Path:
    """`path` made (or left) a directory only its owner can enter: 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def spawn(
    run_dir: Path,
    log_dir: Path,
    name: str,
    argv: list[str],
    marker: str,
    env: dict | None = None,
    cwd: Path | None = None,
) -> Managed:
    """Start `argv` as the leader of a new process group, logging to logs/<name>.log.
    What it writes is its owner's only (umask 077): logs and files of a dev env hold
    passwords (Airflow's admin password file, its api-server's log)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = os.fdopen(os.open(log_dir / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
        umask=PRIVATE_UMASK,
    )
    log.close()
    pidfile(run_dir, name).write_text(json.dumps({"pid": proc.pid, "marker": marker, "argv": argv}))
    return Managed(name=name, pid=proc.pid, marker=marker, proc=proc)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # fields[0] is the state, fields[2] the process group id.
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def stop(run_dir: Path, name: str, timeout: float = 20.0) -> bool:
    """Stop a component's whole process group; True when something was running."""
    managed = read(run_dir, name)
    if managed is None:
        return False
    was_running = managed.alive()
    if was_running:
        try:
            pgid = os.getpgid(managed.pid)
        except ProcessLookupError:
            pgid = None
        if pgid == managed.pid:
            stop_group(pgid, timeout)
        else:  # not a group leader any more: signal the process alone
            _signal_until_gone([managed.pid], timeout)
    pidfile(run_dir, name).unlink(missing_ok=True)
    return was_running


def stop_group(pgid: int, timeout: float = 20.0) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _group_members(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal_until_gone(pids: list[int], timeout: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(Path(f"/proc/{p}").exists() for p in pids):
                return
            time.sleep(0.1)


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
