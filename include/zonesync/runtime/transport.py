"""Kafka addressing and client settings shared by every Kafka client of zonesync.

Bootstrap servers come from ZONESYNC_KAFKA_BOOTSTRAP (a real cluster), or from
the dev broker's info file (ZONESYNC_KAFKA_BOOTSTRAP_FILE, default
<state dir>/broker.json). The file is re-read whenever a client is rebuilt, so
workers follow a dev broker that restarted on new ports.

A real cluster authenticates each client (docs/security.md): ZONESYNC_KAFKA_SECURITY_PROTOCOL
(SASL_SSL, SASL_PLAINTEXT or SSL), ZONESYNC_KAFKA_SASL_MECHANISM (SCRAM-SHA-512 by default
with SASL), ZONESYNC_KAFKA_USERNAME / ZONESYNC_KAFKA_PASSWORD (the worker's own principal:
its ACLs let a replicator write its zone's topic and an applier read the others'), and for
TLS ZONESYNC_KAFKA_SSL_CA / _SSL_CERT / _SSL_KEY (files). The dev broker needs none.
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


PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
_TLS_FILES = {
    "ZONESYNC_KAFKA_SSL_CA": "ssl.ca.location",
    "ZONESYNC_KAFKA_SSL_CERT": "ssl.certificate.location",
    "ZONESYNC_KAFKA_SSL_KEY": "ssl.key.location",
}


def security_config(env: dict | None = None) -> dict:
    """librdkafka's authentication settings from the environment ({} for the dev broker);
    a TransportError naming the variable and the fix when they do not fit together."""
    env = os.environ if env is None else env
    protocol = (env.get("ZONESYNC_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise TransportError(f"ZONESYNC_KAFKA_SECURITY_PROTOCOL={protocol!r}: use one of {', '.join(PROTOCOLS)}")
    out: dict = {} if protocol == "PLAINTEXT" else {"security.protocol": protocol}
    if protocol.startswith("SASL"):
        mechanism = (env.get("ZONESYNC_KAFKA_SASL_MECHANISM") or MECHANISMS[0]).strip().upper()
        if mechanism not in MECHANISMS:
            raise TransportError(f"ZONESYNC_KAFKA_SASL_MECHANISM={mechanism!r}: use one of {', '.join(MECHANISMS)}")
        for name in ("ZONESYNC_KAFKA_USERNAME", "ZONESYNC_KAFKA_PASSWORD"):
            if not env.get(name):
                raise TransportError(f"{name} is not set: {protocol} needs this worker's Kafka principal and password")
        out |= {"sasl.mechanism": mechanism, "sasl.username": env["ZONESYNC_KAFKA_USERNAME"],
                "sasl.password": env["ZONESYNC_KAFKA_PASSWORD"]}  # fmt: skip
    elif env.get("ZONESYNC_KAFKA_USERNAME") or env.get("ZONESYNC_KAFKA_PASSWORD"):
        raise TransportError(f"ZONESYNC_KAFKA_USERNAME/PASSWORD are set but ZONESYNC_KAFKA_SECURITY_PROTOCOL "
                             f"is {protocol}: set it to SASL_SSL (or SASL_PLAINTEXT), or the password is "
                             "never used")  # fmt: skip
    for name, key in _TLS_FILES.items():
        if env.get(name):
            if not protocol.endswith("SSL"):
                raise TransportError(f"{name} is set but ZONESYNC_KAFKA_SECURITY_PROTOCOL is {protocol}: "
                                     "use SSL or SASL_SSL")  # fmt: skip
            out[key] = env[name]
    return out


def producer_config(bootstrap_servers: str) -> dict:
    return {
        **security_config(),
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
        **security_config(),
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
