"""Imported by every Airflow process at start (Airflow's airflow_local_settings hook).

It preloads the zone switch's modules into the scheduler, so LocalExecutor's
workers, forked from it, hand them to every task process they fork: each task of
a switch then starts without importing them again. Three task starts fall inside
a switch's write-blocked window, and on a busy machine each import costs a
noticeable part of a second.
"""

import zonesync.switch.steps  # noqa: F401
import zonesync_airflow.operators.switch  # noqa: F401
import zonesync_airflow.sensors.switch  # noqa: F401
