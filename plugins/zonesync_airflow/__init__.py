"""zonesync's Airflow integration: hooks, operators, sensors, triggers and the plugin.

Kept importable without side effects: Airflow imports this package from the
plugins folder, DAG files import operators from it, and neither may do I/O at
import time.
"""
