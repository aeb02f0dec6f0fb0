"""The AirflowPlugin that registers zonesync with Airflow (more parts join as they land):
its HTTP API (api.py) under /zonesync on Airflow's api-server."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from zonesync_airflow.api import app


class ZonesyncPlugin(AirflowPlugin):
    name = "zonesync"
    fastapi_apps = [{"app": app, "url_prefix": "/zonesync", "name": "zonesync API"}]
