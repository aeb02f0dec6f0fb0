"""The AirflowPlugin that registers zonesync with Airflow (more parts join as they land)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class ZonesyncPlugin(AirflowPlugin):
    name = "zonesync"
