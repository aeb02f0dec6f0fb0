"""The data that moves with a migration's locating entities: their resident rows
(resident.py, the stock copy's Spark job) and their KV keys (kv_keys.py). The steps
(migrate/steps.py) call these at their place in the protocol: admit before the stock
copy, verify_keys in verify, check_keys_in_window in the final check, kv_moved in the
lift's outcome, release after the lift, undo_admit in a rollback."""

from __future__ import annotations

import json

from zonesync.copy import replaced_stage
from zonesync.migrate import kv_keys, resident
from zonesync.migrate.context import MigrationContext, MigrationError, rules_of, running, with_zone
from zonesync.migrate.store import SUCCEEDED, Migration


def stock_run_id(run_id: str) -> str:
    """The stock copy's run id (its chunks' state, in the target's zonesync.copy_chunks)."""
    return f"{run_id}.stock"


def resident_tables(ctx: MigrationContext, run: Migration) -> dict[str, str]:
    return resident.tables(rules_of(ctx), run.entities)


def before_the_copy(run: Migration, step: str) -> None:
    """plan1 copies and checks while the LEs are written; plan2 with their writes stopped."""
    allowed = ("preflight", "checked", "stopped") if run.mode == "plan2" else ("preflight", "checked")
    if run.phase not in allowed:
        raise MigrationError(f"{step}: the migration is past its copy (phase {run.phase}): it runs before the cutover")


def admit(ctx: MigrationContext) -> dict:
    """Resident tables (resident.py): the target's stale copies of the LEs' rows purged and
    the LEs admitted there, once (the target's resident_admits is the record); what the
    stock copy's Spark job needs ({tables: '' when nothing resident moves}); then the LEs'
    KV keys copied to the target (kv_keys.py, the bulk copy)."""
    run = running(ctx)
    before_the_copy(run, "admit")
    kv = kv_move(ctx, run, "admit")  # its settings checked before anything changes
    rules = rules_of(ctx)
    predicates = resident.tables(rules, run.entities)
    spec = resident.stock_spec(rules, predicates, run.run_id)
    for zone in (run.source_zone, run.target_zone):  # what the stock copy (the full copy's job) can take
        with_zone(
            ctx, zone, lambda conn, zone=zone: resident.check_copyable(conn, spec, zone, target=zone == run.target_zone)
        )
    stock = {"run_id": stock_run_id(run.run_id), "source": run.source_zone, "target": run.target_zone,
             "zones": f"{run.source_zone},{run.target_zone}", "tables": ",".join(predicates),
             "where": json.dumps(spec)}  # fmt: skip
    if predicates and not with_zone(ctx, run.target_zone, lambda conn: resident.admitted(conn, run.run_id)):
        with_zone(ctx, run.target_zone, lambda conn: resident.purge(conn, predicates))  # left by a crashed rollback
        with_zone(ctx, run.target_zone, lambda conn: resident.admit(conn, run.run_id, run.source_zone, run.les))
    if kv is not None:
        kv_step("admit", kv.bulk)
    return stock


def kv_move(ctx: MigrationContext, run: Migration, step: str) -> kv_keys.KvMove | None:
    """The run's KV move (kv_keys.py), None when no KV repo holds its LEs' keys."""
    return kv_step(step, lambda: kv_keys.mover(ctx.meta, run, ctx.zone_conn))


def kv_step(step: str, fn):
    try:
        return fn()
    except kv_keys.KvMoveError as exc:
        raise MigrationError(f"{step}: {exc}") from None


def release(ctx: MigrationContext, purge_source: bool = True) -> dict:
    """After the lift: the target's admits withdrawn (the LEs are its own now) and, unless
    kept by policy, the source's copy of their resident rows purged. {table: rows purged}."""
    run = ctx.store.require(ctx.run_id)
    if run.status != SUCCEEDED:
        raise MigrationError(f"release: migration {ctx.run_id} is {run.status} ({run.phase}): only a lifted "
                             "migration releases its source")  # fmt: skip
    predicates = resident_tables(ctx, run)
    with_zone(ctx, run.target_zone, lambda conn: resident.withdraw(conn, run.run_id))
    if not purge_source:
        return {}
    purged = with_zone(ctx, run.source_zone, lambda conn: resident.purge(conn, predicates)) if predicates else {}
    kv = kv_move(ctx, run, "release")
    if kv is not None:  # {"kv:<repo>": keys deleted at the source}
        purged.update({f"kv:{repo}": n for repo, n in kv_step("release", lambda: kv.remove("source")).items()})
    return purged


def verify_keys(ctx: MigrationContext) -> None:
    """Before the stop (plan1's verify): the LEs' KV keys compared while still written
    (kv_keys.compare_before_stop), so the window compares only those changed since; a
    difference not in flight fails the step."""
    kv = kv_move(ctx, running(ctx), "verify")
    differ = kv_step("verify", kv.compare_before_stop) if kv is not None else []
    if differ:
        raise MigrationError(f"verify: the LEs' KV keys differ: {'; '.join(differ)[:2000]}")


def keys_to_move(ctx: MigrationContext, run: Migration) -> int:
    """How many KV keys of the LEs the source holds (0: none, or no KV repo has their types)."""
    kv = kv_move(ctx, run, "stop_first")
    return kv_step("stop_first", kv.count) if kv is not None else 0


def check_keys_in_window(ctx: MigrationContext, run: Migration) -> None:
    """(final_check: writes stopped, the target synced) the keys changed since verify's look
    (plan2: every key) caught up and compared; MigrationError naming those that differ."""
    kv = kv_move(ctx, run, "final_check")
    if kv is not None:
        differ = kv_step("final_check", kv.in_window)
        if differ:
            raise MigrationError(f"final_check: the LEs' KV keys differ: {'; '.join(differ)[:2000]}")


def kv_moved(ctx: MigrationContext, run: Migration) -> str:
    """The KV keys moved per repo, for the outcome (never what holds the lift back)."""
    try:
        kv = kv_move(ctx, run, "lift")
        return kv_keys.summary(kv.moved()) if kv is not None else ""
    except Exception as exc:  # noqa: BLE001 - a KV store down after the flip: the tenant is lifted all the same
        return f"; KV keys moved: not counted ({str(exc)[:200]})"


def undo_admit(ctx: MigrationContext, run: Migration) -> None:
    """Before the flip: the target no longer admits the LEs, and its partial copy of their
    resident rows is purged (withdrawn first: no applier adds a row after the purge)."""
    rules = rules_of(ctx)
    predicates = resident.tables(rules, run.entities)
    if predicates:  # (both idempotent: a rollback retried after a crash does them again)
        with_zone(ctx, run.target_zone, lambda conn: resident.withdraw(conn, run.run_id))
        with_zone(ctx, run.target_zone, lambda conn: resident.purge(conn, predicates))
        stages = [replaced_stage.stage_table(stock_run_id(run.run_id), t)
                  for t in predicates if rules.tables[t].replace_key]  # fmt: skip
        if stages:  # the run's key map and stages (its rows are purged)
            with_zone(ctx, run.target_zone, lambda conn: resident.forget_keys(conn, run.run_id, stages))
    kv = kv_move(ctx, run, "rollback")
    if kv is not None:  # the keys the run wrote at the target (no guard writes them before the flip)
        kv_step("rollback", lambda: kv.remove("target"))
