"""A Spark standalone cluster for tests: one master and one worker on 127.0.0.1, from
pyspark's own `bin/spark-class`, on free ports, in the test's state dir; and
spark-submit of a zonesync job to it (or to local[2]) as a child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

from zonesync import jvm
from zonesync.dev.procs import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    def __init__(self, workdir: Path, cores: int = 2, memory: str = "1g"):
        self.workdir = workdir
        self.port, self.ui_port, self.worker_ui = free_port(), free_port(), free_port()
        self.cores, self.memory = cores, memory
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict:
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(self.workdir / "logs"), PYSPARK_PYTHON=sys.executable)  # fmt: skip
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(
            subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )  # fmt: skip
        )

    def start(self, timeout: float = 60.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui_port)])  # fmt: skip
        self._spawn("worker", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                               "--webui-port", str(self.worker_ui), "--cores", str(self.cores), "--memory",
                               self.memory, "--work-dir", str(self.workdir / "work")])  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_workers() >= 1:
                return self
            for p in self.procs:
                assert p.poll() is None, f"a Spark daemon exited at start: see {self.workdir}"
            time.sleep(0.3)
        raise AssertionError(f"no Spark worker registered with {self.url} in {timeout} s: see {self.workdir}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as resp:
                return int(json.loads(resp.read()).get("aliveworkers", 0))
        except OSError:
            return 0

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


def submit(job: Path, args: list[str], master: str, log: Path, env: dict | None = None) -> subprocess.Popen:
    """spark-submit a job (client mode) as the leader of its own process group."""
    cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, *jvm.submit_options(),
           "--conf", "spark.executor.memory=512m", str(job), *args]  # fmt: skip
    full_env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable, **(env or {}))
    full_env.pop("PYSPARK_DRIVER_PYTHON", None)
    return subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=full_env,  # noqa: SIM115
                            start_new_session=True)  # fmt: skip
