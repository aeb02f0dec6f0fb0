"""What the tasks of a step's own DAG run came to: the rollback and report steps say which failed."""

from __future__ import annotations


def failed_tasks(context, task_ids) -> list[str]:
    """Those of `task_ids` (sorted) that failed in the running task's DAG run."""
    ti, run_id = context["ti"], context["dag_run"].run_id
    wanted = sorted(task_ids)
    states = ti.get_task_states(dag_id=ti.dag_id, task_ids=wanted, run_ids=[run_id]).get(run_id, {})
    return [t for t in wanted if states.get(t) == "failed"]
