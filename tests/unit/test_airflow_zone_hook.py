"""ZoneHook: an Airflow connection becomes the one Endpoint type every layer connects through."""

from __future__ import annotations

import json

import pytest
from airflow.sdk import Connection  # airflow first: its start imports the plugin (airflow_local_settings)

pytestmark = pytest.mark.unit


def _conn(conn_id="zonesync_zone_b", extra=None, **fields):
    extra = {"zone_id": 2} if extra is None else extra
    return Connection(conn_id=conn_id, conn_type="mysql", extra=json.dumps(extra), **fields)


def test_a_connection_becomes_an_endpoint():
    from zonesync.runtime.endpoints import Endpoint
    from zonesync_airflow.hooks.zone import endpoint_of

    conn = _conn(host="10.0.0.5", port=3307, login="app", password="s3cret", schema="shop")
    ep = endpoint_of(conn, "zonesync_zone_b")
    assert ep == Endpoint(
        name="b", host="10.0.0.5", port=3307, user="app", password="s3cret", database="shop", zone_id=2
    )
    assert ep.jdbc_url() == "jdbc:mysql://10.0.0.5:3307/shop"
    assert "s3cret" not in repr(ep) and "s3cret" not in ep.url()


def test_defaults_and_zone_name_from_extra():
    from zonesync_airflow.hooks.zone import endpoint_of

    ep = endpoint_of(_conn(extra={"zone_id": "7", "zone_name": "east"}, login="app"), "zonesync_zone_b")
    assert (ep.name, ep.zone_id, ep.host, ep.port, ep.user, ep.password, ep.database) == (
        "east",
        7,
        "127.0.0.1",
        3306,
        "app",
        "",
        "zonesync_app",
    )


def test_a_connection_without_a_login_is_refused_never_root():
    from zonesync_airflow.hooks.meta import meta_config_of
    from zonesync_airflow.hooks.zone import endpoint_of

    with pytest.raises(ValueError, match="zonesync_zone_b: login is empty"):
        endpoint_of(_conn(), "zonesync_zone_b")
    with pytest.raises(ValueError, match="zonesync_meta: login is empty"):
        meta_config_of(_conn("zonesync_meta", extra={}))


def test_a_missing_zone_id_names_the_connection_and_the_fix():
    from zonesync_airflow.hooks.zone import endpoint_of

    with pytest.raises(ValueError, match=r'zonesync_zone_b: extra field zone_id is missing: add \{"zone_id": N\}'):
        endpoint_of(_conn(extra={}), "zonesync_zone_b")


def test_the_hook_resolves_through_airflow(monkeypatch):
    from zonesync_airflow.hooks.zone import ZoneHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_ZONESYNC_ZONE_Q", _conn("zonesync_zone_q", host="h", port=1, login="app").as_json()
    )
    ep = ZoneHook.for_zone("q").endpoint()
    assert (ep.name, ep.host, ep.port, ep.zone_id) == ("q", "h", 1, 2)
