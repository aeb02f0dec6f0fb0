"""The AirflowPlugin that registers zonesync with Airflow: its HTTP API (api/) under
/zonesync on Airflow's api-server, and the console page (api/page.py) as "zonesync" in
Airflow's navigation (an external view, shown in the UI's frame)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from zonesync_airflow.api import app


class ZonesyncPlugin(AirflowPlugin):
    name = "zonesync"
    fastapi_apps = [{"app": app, "url_prefix": "/zonesync", "name": "zonesync API"}]
    external_views = [
        {
            "name": "zonesync",
            "href": "/zonesync/console/",
            "url_route": "zonesync",
            "destination": "nav",
            "category": "browse",
        }  # fmt: skip
    ]
