"""The embedded dev broker: librdkafka's mock cluster, held open by one process.

librdkafka ships an in-memory Kafka cluster that speaks the real wire protocol
(produce, fetch, consumer groups, idempotent producer), so every client in every
process talks to it exactly as it would to a real cluster. `zonesync dev broker`
creates one, writes its bootstrap servers to the state dir, and serves a tiny
line protocol on a loopback control port so other processes can create topics
with a chosen partition count: the mock cluster's own auto-create makes only 4,
and AdminClient.create_topics does not complete against it.

Limits, by construction: everything is in memory and gone when the process
stops; each partition keeps about 5 MiB (older messages are dropped silently, so
consumers must check LSN continuity); replication factor is cosmetic.

Control protocol (one request per line, one reply line):
    PING                      -> OK <bootstrap>
    CREATE <topic> <parts>    -> OK | ERR <reason>
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import signal
import socket
import socketserver
import sys
import threading
from pathlib import Path

TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


class BrokerError(RuntimeError):
    pass


def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    pkg = Path(confluent_kafka.__file__).resolve().parent
    candidates = sorted(glob.glob(str(pkg.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    candidates += sorted(glob.glob(str(pkg / "librdkafka*.so*")))
    if not candidates:
        raise BrokerError("the librdkafka bundled with confluent-kafka was not found: reinstall with `make setup`")
    lib = ctypes.CDLL(candidates[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_err2str.restype = ctypes.c_char_p
    lib.rd_kafka_err2str.argtypes = [ctypes.c_int]
    return lib


class MockCluster:
    """A librdkafka mock cluster owned by this process."""

    def __init__(self, brokers: int = 1):
        self._lib = _librdkafka()
        errstr = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        self._lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, 512)
        self._rk = self._lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER
        if not self._rk:
            raise BrokerError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._mc = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            raise BrokerError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = self._lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        self._lock = threading.Lock()
        self.topics: dict[str, int] = {}

    def create_topic(self, topic: str, partitions: int, replication: int = 1) -> None:
        if not TOPIC_RE.fullmatch(topic):
            raise BrokerError(f"topic name {topic!r} is invalid: use letters, digits, '.', '_' and '-'")
        if not 1 <= partitions <= 1024:
            raise BrokerError(f"partitions={partitions} is out of range: use 1..1024")
        with self._lock:
            existing = self.topics.get(topic)
            if existing is not None:
                # Creating is idempotent; a different partition count is a real conflict.
                if existing != partitions:
                    raise BrokerError(f"topic {topic} exists with {existing} partitions, not {partitions}")
                return
            err = self._lib.rd_kafka_mock_topic_create(self._mc, topic.encode(), partitions, replication)
            if err:
                raise BrokerError(f"creating {topic}: {self._lib.rd_kafka_err2str(err).decode()}")
            self.topics[topic] = partitions

    def close(self) -> None:
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None


def _make_handler(cluster: MockCluster):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for raw in self.rfile:
                parts = raw.decode(errors="replace").split()
                try:
                    if parts == ["PING"]:
                        reply = f"OK {cluster.bootstrap}"
                    elif len(parts) == 3 and parts[0] == "CREATE":
                        cluster.create_topic(parts[1], int(parts[2]))
                        reply = "OK"
                    else:
                        reply = "ERR expected PING or CREATE <topic> <partitions>"
                except (BrokerError, ValueError) as exc:
                    reply = f"ERR {exc}"
                self.wfile.write((reply + "\n").encode())
                self.wfile.flush()

    return Handler


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(info_file: Path, topics: list[str], partitions: int, brokers: int = 1, control_port: int = 0) -> None:
    """Run the broker until SIGTERM/SIGINT; the entry point of `zonesync dev broker`."""
    cluster = MockCluster(brokers)
    for topic in topics:
        cluster.create_topic(topic, partitions)
    server = _Server(("127.0.0.1", control_port), _make_handler(cluster))
    info = {"bootstrap": cluster.bootstrap, "control_port": server.server_address[1], "pid": os.getpid()}
    tmp = info_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.rename(info_file)
    print(f"dev broker up: bootstrap {cluster.bootstrap}, control 127.0.0.1:{info['control_port']}", flush=True)

    def _stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        info_file.unlink(missing_ok=True)
        cluster.close()


def request(control_port: int, line: str, timeout: float = 5.0) -> str:
    with socket.create_connection(("127.0.0.1", control_port), timeout=timeout) as sock:
        sock.sendall((line + "\n").encode())
        reply = sock.makefile().readline().strip()
    if not reply.startswith("OK"):
        raise BrokerError(reply.removeprefix("ERR ").strip() or "no reply from the dev broker")
    return reply[2:].strip()


def read_info(info_file: Path) -> dict | None:
    try:
        return json.loads(info_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


def create_topic(info_file: Path, topic: str, partitions: int) -> None:
    info = read_info(info_file)
    if info is None:
        raise BrokerError(f"the dev broker is not running ({info_file} missing): run `zonesync dev up`")
    request(info["control_port"], f"CREATE {topic} {partitions}")


if __name__ == "__main__":  # pragma: no cover - used through `zonesync dev broker`
    serve(Path(sys.argv[1]), sys.argv[3:], int(sys.argv[2]))
