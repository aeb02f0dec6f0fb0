"""Kafka addressing shared by replicators and appliers.

Bootstrap servers come from ZONESYNC_KAFKA_BOOTSTRAP (a real cluster), or from
the dev broker's info file (ZONESYNC_KAFKA_BOOTSTRAP_FILE, default
<state dir>/broker.json). The file is re-read whenever a client is rebuilt, so
workers follow a dev broker that restarted on new ports.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from zonesync import config
from zonesync.user_files import MISSING, UserFileError, read_user_text


class TransportError(RuntimeError):
    pass


TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{0,100}")


def topic(zone: str) -> str:
    """A zone's change topic: zonesync.<zone>.changes, after ZONESYNC_TOPIC_PREFIX when set
    (several environments sharing one Kafka cluster, e.g. `staging.`)."""
    prefix = os.environ.get("ZONESYNC_TOPIC_PREFIX", "")
    if not TOPIC_PREFIX.fullmatch(prefix):
        raise TransportError(
            f"ZONESYNC_TOPIC_PREFIX={prefix!r}: use up to 100 letters, digits, '.', '_' or '-', e.g. 'staging.'"
        )
    return f"{prefix}zonesync.{zone}.changes"


def bootstrap(env: dict | None = None) -> str:
    env = dict(os.environ if env is None else env)
    if env.get("ZONESYNC_KAFKA_BOOTSTRAP"):
        return env["ZONESYNC_KAFKA_BOOTSTRAP"]
    given = env.get("ZONESYNC_KAFKA_BOOTSTRAP_FILE")
    path = Path(given or config.load(env).broker_file)
    what = "ZONESYNC_KAFKA_BOOTSTRAP_FILE" if given else "the dev broker's info file"
    try:
        doc = json.loads(read_user_text(path, what))
    except UserFileError as exc:
        if exc.reason == MISSING:
            raise TransportError(
                f"no Kafka bootstrap: set ZONESYNC_KAFKA_BOOTSTRAP or start the dev broker ({path} missing)"
            ) from None
        raise TransportError(f"no Kafka bootstrap: {exc}") from None
    except ValueError:  # not JSON (an empty file too)
        doc = None
    servers = doc.get("bootstrap") if isinstance(doc, dict) else None
    if not isinstance(servers, str) or not servers:
        raise TransportError(
            f'no Kafka bootstrap: {path} ({what}) is not JSON with a "bootstrap" string (as the dev broker '
            "writes it): fix the file, or set ZONESYNC_KAFKA_BOOTSTRAP=host:port instead"
        )
    return servers


def partitions(env: dict | None = None) -> int:
    return config.load(env).kafka_partitions


def producer_config(bootstrap_servers: str) -> dict:
    return {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": 0.5,  # a transaction's events, produced microseconds apart, share a batch
        "batch.num.messages": 10000,
        # A batch is what one fetch of a partition returns at least (Kafka hands out whole
        # batches). An applier keeping source transactions whole (--atomic-transactions)
        # must hold one from every partition before the first transaction is complete:
        # with librdkafka's 1 MB batches that was ~2,400 events x 32 partitions, past its
        # 50k-event hold cap, which then let rounds through torn (session 12). 256 KiB
        # keeps it near 600 x 32, at ~10% of the bulk catch-up rate (measured, noisy).
        "batch.size": 256 * 1024,
        "queue.buffering.max.messages": 500000,
        "message.timeout.ms": 30000,
        "socket.timeout.ms": 10000,
        "socket.nagle.disable": True,
    }


def consumer_config(bootstrap_servers: str, group: str) -> dict:
    return {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group,  # offsets are never committed: positions live with the data
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 2,
        "fetch.min.bytes": 1,
        "socket.timeout.ms": 10000,
        "socket.nagle.disable": True,
    }
