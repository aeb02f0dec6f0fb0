"""Who a run's audit records name: the user Airflow authenticated when the run was
triggered, never a field of the run's conf that anyone triggering it could fill in.

A conf `actor` (the `zonesync ... --actor` option: a person the triggering account acts
for) is kept beside it as a claim, "user (for claimed)". A run with no triggering user
is the scheduler's ("schedule") or a local test run's ("airflow")."""

from __future__ import annotations


def run_actor(dag_run) -> str:
    user = str(getattr(dag_run, "triggering_user_name", None) or "")[:48]  # the audit's actor: VARCHAR(128)
    claimed = str((getattr(dag_run, "conf", None) or {}).get("actor") or "").strip()[:64]
    if not user:
        user = "schedule" if getattr(dag_run, "run_type", None) == "scheduled" else "airflow"
    return f"{user} (for {claimed})" if claimed and claimed != user else user
