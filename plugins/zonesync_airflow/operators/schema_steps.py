"""Operators of the schema_change DAG: one per step (zonesync.schema.steps).

They reach the zones through the Airflow connections `zonesync_schema_<zone>`: in a
deployment the zs_schema account, the only one with DDL rights on the application schema
(docker/mariadb/roles.sql); the other DAGs' `zonesync_zone_<zone>` (zs_batch) have none.

Each builds the step's context from the run's params (and, after preflight, the table,
zones and wanted definition preflight returned). A refusal a retry cannot change
(SchemaChangeRefused) fails the task at once; anything else is retried (every step is
idempotent: apply skips a zone that has the change). report runs whatever happened and
says which zones have the change.
"""

from __future__ import annotations

from dataclasses import replace

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from zonesync.apply.tools.progress import lag_report
from zonesync.schema import runs, steps
from zonesync_airflow.hooks.meta import ZonesyncMetaHook
from zonesync_airflow.operators.actor import run_actor
from zonesync_airflow.operators.switch import ZoneConnections
from zonesync_airflow.operators.task_states import failed_tasks

STEPS = ("preflight", "apply", "verify", "resume", "report")


def schema_context(context, meta_conn_id: str, zone_conn_prefix: str = "zonesync_schema_") -> steps.SchemaChangeContext:
    params = context["params"]
    return steps.SchemaChangeContext(
        meta=ZonesyncMetaHook(meta_conn_id).meta_config(),
        run_id=context["dag_run"].run_id,
        request=steps.SchemaChangeRequest(
            statement=params["sql"],
            zones=tuple(params.get("zones") or ()),
            reason=params["reason"],
            max_lag_s=float(params["max_lag_s"]),
        ),
        zone_conn=ZoneConnections(zone_conn_prefix),
    )


class SchemaChangeStepOperator(BaseOperator):
    """Runs one step of a schema change: preflight, apply, verify, resume or report."""

    ui_color = "#eef0fb"

    def __init__(self, *, step: str, meta_conn_id: str = "zonesync_meta", **kwargs) -> None:
        if step not in STEPS:
            raise ValueError(f"step {step!r} is not a schema_change step")
        super().__init__(**kwargs)
        self.step = step
        self.meta_conn_id = meta_conn_id

    def execute(self, context):
        ctx = schema_context(context, self.meta_conn_id)
        try:
            if self.step == "preflight":
                plan = steps.preflight(ctx, lambda zones: _lag(ctx.meta, zones))
                runs.start(ctx.meta, ctx.run_id, plan["table"], ctx.request.statement, plan["zones"],
                           ctx.request.reason, run_actor(context["dag_run"]))  # fmt: skip
                self.log.info("schema change of %s in zones %s: %s (%s)", plan["table"], ", ".join(plan["zones"]),
                              ctx.request.statement, ctx.request.reason)  # fmt: skip
                return plan
            plan = context["ti"].xcom_pull(task_ids="preflight")
            if not plan:
                raise AirflowFailException(f"{self.step}: preflight did not pass: nothing was changed")
            ctx.request = replace(ctx.request, zones=tuple(plan["zones"]))
            return getattr(self, f"_{self.step}")(ctx, plan, context)
        except steps.SchemaChangeRefused as exc:
            raise AirflowFailException(f"{self.step}: {exc}") from exc

    def _apply(self, ctx, plan, context) -> dict:
        done = {}
        runs.phase(ctx.meta, ctx.run_id, "applying")
        for zone in ctx.request.zones:  # in the request's order; a retry skips the zones done
            done[zone] = steps.apply(ctx, zone, plan["table"], plan["wanted"])
            self.log.info("zone %s: %s", zone, done[zone])
        return done

    def _verify(self, ctx, plan, context) -> str:
        steps.verify(ctx, plan["table"], plan["wanted"])
        runs.phase(ctx.meta, ctx.run_id, "verified")
        return f"{plan['table']} is the same in zones {', '.join(ctx.request.zones)}"

    def _resume(self, ctx, plan, context) -> list[str]:
        resumed = steps.resume(ctx, plan["table"])
        self.log.info("holds of %s set draining in: %s", plan["table"], ", ".join(resumed) or "no zone")
        if resumed:  # the drain's progress: `zonesync runs`, the console
            parked = runs.parked_now(ctx.zone_conn, resumed, plan["table"])
            runs.draining(ctx.meta, ctx.run_id, parked)
            self.log.info("events parked at resume: %s", ", ".join(f"{z} {n}" for z, n in parked.items()))
        return resumed

    def _report(self, ctx, plan, context) -> dict:
        changed = steps.changed_zones(ctx, plan["table"], plan["wanted"])
        done = sorted(z for z, yes in changed.items() if yes)
        left = sorted(z for z, yes in changed.items() if not yes)
        self.log.info("%s changed in zone(s) %s; unchanged in %s", plan["table"], ", ".join(done) or "none",
                      ", ".join(left) or "none")  # fmt: skip
        failed = failed_tasks(context, [t for t in self.dag.task_ids if t != self.task_id])  # every step before it
        if failed:
            why = (f"{', '.join(failed)} failed: {plan['table']} has the change in zone(s) "
                   f"{', '.join(done) or 'none'} and not in {', '.join(left) or 'none'}; the holds were not resumed. "
                   "Fix the cause and run it again (zones done are skipped)")  # fmt: skip
            runs.finish(ctx.meta, ctx.run_id, runs.FAILED, why)
            raise AirflowFailException(why)
        runs.finish(ctx.meta, ctx.run_id, runs.SUCCEEDED, f"{plan['table']} changed in zone(s) {', '.join(done)}")
        return {"changed": done, "unchanged": left}


def _lag(meta, zones: tuple[str, ...]) -> float:
    """The largest replication lag, in seconds, among the zones (apply/tools/progress)."""
    rows = lag_report(meta)
    return max((float(sec) for s, t, _ev, sec, _age, _old in rows if s in zones and t in zones), default=0.0)
