"""Kafka client authentication from the environment (runtime/transport.py; issue 24):
every client zonesync builds carries the worker's own principal, and settings that do
not fit together are refused in one line naming the variable."""

from __future__ import annotations

import pytest

from zonesync.runtime import transport
from zonesync.runtime.transport import TransportError, security_config

pytestmark = pytest.mark.unit


def test_the_dev_broker_needs_no_settings():
    assert security_config({}) == {}


def test_sasl_carries_the_workers_principal_with_scram_by_default():
    env = {"ZONESYNC_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "ZONESYNC_KAFKA_USERNAME": "applier-b",
           "ZONESYNC_KAFKA_PASSWORD": "s3cret", "ZONESYNC_KAFKA_SSL_CA": "/run/secrets/ca.pem"}  # fmt: skip
    assert security_config(env) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "applier-b",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/run/secrets/ca.pem",
    }


def test_every_producer_and_consumer_config_carries_it(monkeypatch):
    monkeypatch.setenv("ZONESYNC_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("ZONESYNC_KAFKA_USERNAME", "replicator-a")
    monkeypatch.setenv("ZONESYNC_KAFKA_PASSWORD", "pw")
    for config in (transport.producer_config("k:9092"), transport.consumer_config("k:9092", "g")):
        assert (config["sasl.username"], config["security.protocol"]) == ("replicator-a", "SASL_PLAINTEXT")
        assert config["bootstrap.servers"] == "k:9092"


@pytest.mark.parametrize(
    "env, words",
    [({"ZONESYNC_KAFKA_SECURITY_PROTOCOL": "SASL"}, "ZONESYNC_KAFKA_SECURITY_PROTOCOL='SASL': use one of"),
     ({"ZONESYNC_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "ZONESYNC_KAFKA_USERNAME": "x"},
      "ZONESYNC_KAFKA_PASSWORD is not set: SASL_SSL needs"),
     ({"ZONESYNC_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "ZONESYNC_KAFKA_SASL_MECHANISM": "GSSAPI",
       "ZONESYNC_KAFKA_USERNAME": "x", "ZONESYNC_KAFKA_PASSWORD": "pw-never-shown"},
      "ZONESYNC_KAFKA_SASL_MECHANISM='GSSAPI'"),
     ({"ZONESYNC_KAFKA_USERNAME": "x", "ZONESYNC_KAFKA_PASSWORD": "pw-never-shown"}, "the password is never used"),
     ({"ZONESYNC_KAFKA_SSL_CA": "/ca.pem"}, "ZONESYNC_KAFKA_SSL_CA is set but"),
     ],
)  # fmt: skip
def test_settings_that_do_not_fit_are_refused_naming_the_variable(env, words):
    with pytest.raises(TransportError) as refused:
        security_config(env)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert "pw-never-shown" not in str(refused.value)
