"""What the operator console shows, and the few things it does: one service layer for the
HTTP API (plugins/zonesync_airflow/api), its page and the `zonesync` commands that print
the same (lag, alerts, runs). Every answer is a plain dict or list, read from meta (and,
for locks and a copy's progress, from the zones), by indexed and paged queries.

    lag.py      lag now and over the last hour (lag_samples, written by the appliers)
    mesh.py     zones and their health, the ZSID map of the current rules version
    runs.py     switches, copies, checks, migrations, backfills and schema changes as one list,
                with progress and ETA
    migration_progress.py   a running migration's stage over its whole run, and the run's ETA
    locks.py    locked rows: listed, added by hand, resolved
    actions.py  a switch, copy or check asked for: checked, then its DAG's conf
    access.py   how a caller reaches a zone (connection, writer)
    alert_help.py   each alert kind's resolving command, hint and docs section
"""
