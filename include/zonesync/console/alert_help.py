"""What settles an alert: for every kind the workers and commands raise, the `zonesync`
command that resolves it, filled in from the alert's zone and detail (or None where the
cure is not a command: a file to restore, a setting to change), one line saying what to
do, and the docs section that explains it. The console's alerts table, `GET
/zonesync/api/v1/alerts` and `zonesync alerts` show the same. Pure: no meta, no zones.

    kind                        raised by                        resolve
    row_locked                  applier, locks resolve           zonesync locks resolve --zone Z --table T --pk PK
    partition_halted            applier                          zonesync resume ... (events gone: a repair copy)
    table_held / table_resumed  applier (schema hold)            zonesync schema resume --zone Z --table T / -
    lag_warning                 applier                          zonesync lag --partitions (to watch it)
    count_mismatch              zonesync reconcile               zonesync check --zones S,Z --repair
    consistency_mismatch        the consistency check            zonesync check --tables T --repair
    kv_ambiguous, kv_untaggable KV guard, KV tagger              - (the tag rules' patterns)
    tag_refused                 tagger                           -
    primary_changed             replicator                       zonesync zones set-primary Z HOST:PORT
    primary_promoted            zones set-primary                zonesync zones primaries Z (the runbook's check)
    failover_lost_transactions  zones set-primary --allow-lost   zonesync check (every zone)
    binlog_unreadable           replicator                       zonesync binlog skip-lost --zone Z (if not restored)
    binlog_skipped              binlog skip-lost                 zonesync copy --from Z --to X --mode repair, each X
    no_checkpoint               replicator                       zonesync binlog bootstrap --zone Z --at current
    binlog_settings, server_id_clash, event_too_large, capture_fault: replicator, -

Any other kind: no command; its detail's `action` if it has one, else read it, fix the
cause and acknowledge (`zonesync alerts --ack ID`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable

APPLY = "docs/replication.md#apply-the-applier"
CAPTURE = "docs/replication.md#capture-the-replicator"
FAULTS = "docs/replication.md#faults-and-what-the-tests-show"
CHECK = "docs/consistency-check.md#running-one"
COPY = "docs/copy.md#online-full-copy"
FAILOVER = "docs/failover.md#runbook"
SCHEMA = "docs/schema-changes.md#what-is-guaranteed"
KV_PATTERNS = "docs/tagging.md#kv-key-patterns-s004-07-s004-08"
TAGGER = "docs/tagging.md#the-tagger-and-the-tag-store-s004-04-s004-05-s004-10"
RETENTION = "docs/replication.md#binlog-retention"
GENERIC = "docs/console.md#alerts-and-what-resolves-them"


def command(*words) -> str:
    """A `zonesync` command line, each word quoted for a POSIX shell where it needs it."""
    return " ".join(["zonesync", *(shlex.quote(str(w)) for w in words)])


def _pk(pk) -> str:
    """A row's key as `zonesync locks list` prints it (console/locks.py): the alert carries
    the applier's key text, `[42]`, or what an operator typed."""
    if isinstance(pk, str):
        try:
            pk = json.loads(pk)
        except ValueError:
            return pk
    return json.dumps(pk)


def _why(alert: dict) -> str:
    """The --reason of a command that settles the alert: which alert it answers."""
    which = f"alert {alert['id']}" if alert.get("id") is not None else "an alert"
    return f"{which}: {alert['kind']} in zone {alert['zone']}"


def _row_locked(zone: str, d: dict, alert: dict, zones) -> tuple:
    table, pk = d["table"], _pk(d["pk"])
    source = f" from zone {d['source']}" if d.get("source") else ""
    hint = (f"{table} {pk} is locked in zone {zone}, its changes{source} held: resolving takes the current row of "
            "the zone whose change locked it (repair it there first if that row is wrong) and lets its changes "
            "flow again")  # fmt: skip
    return command("locks", "resolve", "--zone", zone, "--table", table, "--pk", pk), hint, APPLY


def _partition_halted(zone: str, d: dict, alert: dict, zones) -> tuple:
    source, partition, why = d["source"], int(d["partition"]), str(d.get("detail") or "")
    resume = command("resume", "--zone", zone, "--source", source, "--partition", partition)
    if any(words in why for words in ("impossible", "needs full copy", "not repaired by")):
        hint = (f"partition {partition} of zone {source}'s changes lost events no resend can bring back: a repair "
                f"copy from zone {source} rebuilds zone {zone}'s rows and clears the halt (or try `{resume}` once "
                "more)")  # fmt: skip
        return command("copy", "--from", source, "--to", zone, "--mode", "repair", "--reason", _why(alert)), hint, COPY
    if d.get("table") or "is missing in the target" in why:
        table = d.get("table") or "the table its detail names"
        return resume, f"create {table} in zone {zone} (with its primary key), then resume the partition", APPLY
    if "still in conflict" in why:
        hint = (f"another row of zone {zone} holds a unique value of the event: change or remove that row (the "
                "detail names table, key and value), then resume the partition")  # fmt: skip
        return resume, hint, APPLY
    hint = (f"fix what the detail names, then resume: partition {partition} of zone {source}'s changes is read "
            "again from where it stopped (a message no zone wrote halts it again: find what produced it)")  # fmt: skip
    return resume, hint, APPLY


def _table_held(zone: str, d: dict, alert: dict, zones) -> tuple:
    table = d["table"]
    hint = (f"{table}'s events are parked in zone {zone}: make its definitions agree (`zonesync schema diff "
            f"--table {table}`, the schema_change DAG), then resume: its parked events are applied")  # fmt: skip
    return command("schema", "resume", "--zone", zone, "--table", table), hint, SCHEMA


def _table_resumed(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = f"{d['table']} is drained in zone {zone}: its parked events are applied again; nothing left to do"
    return None, hint, SCHEMA


def _lag_warning(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"zone {zone}'s applier was {d['behind_seconds']} s behind zone {d['source']} (partition "
            f"{d['partition']}, threshold {d['threshold_s']} s); apply goes on: find what slows it (load, long "
            "locks in the zone, a stopped applier) and acknowledge once the lag is back down")  # fmt: skip
    return command("lag", "--partitions"), hint, APPLY


def _count_mismatch(zone: str, d: dict, alert: dict, zones) -> tuple:
    source = d["source"]
    hint = (f"zone {source} published {d['published']} events of partition {d['partition']}, zone {zone} "
            f"counted {d['committed']}: compare the two zones' rows and set the wrong ones to their owner's "
            f"(`zonesync reconcile --zone {zone} --source {source}` again first: it should still differ)")  # fmt: skip
    return command("check", "--zones", f"{source},{zone}", "--repair", "--reason", _why(alert)), hint, CHECK


def _consistency_mismatch(zone: str, d: dict, alert: dict, zones) -> tuple:
    run_id = d["run_id"]
    tables = sorted(t for t, n in (d.get("tables") or {}).items() if n)
    report = command("check", "report", run_id)
    extra = "; the tables' definitions differ too: `zonesync schema diff`" if d.get("schema") else ""
    if d.get("expectations"):
        extra += f"; expectations failed: {', '.join(map(str, d['expectations']))}"
    if not tables:
        return report, f"check {run_id} found no differing rows to repair{extra}: read its report", CHECK
    hint = (f"{d.get('rows', 'some')} rows differ in {', '.join(tables)}: `{report}` lists each with the zone "
            f"that is right; a check with --repair sets each to its owner's row{extra}")  # fmt: skip
    return command("check", "--tables", ",".join(tables), "--repair", "--reason", _why(alert)), hint, CHECK


def _kv_ambiguous(zone: str, d: dict, alert: dict, zones) -> tuple:
    patterns = " and ".join(map(str, d.get("patterns") or ())) or "two patterns"
    hint = (f"key {d['key']!r} of repo {d['repo']} matches {patterns}: never written or tagged under either; "
            "constrain the patterns in the tag rules (`zonesync tags check FILE`, `zonesync tags apply FILE "
            "--reason ...`) or use another key")  # fmt: skip
    return None, hint, KV_PATTERNS


def _kv_untaggable(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"key {d['key']} of repo {d['repo']} matches no pattern of the tag rules, so it is not tagged: add "
            "one (`zonesync tags apply FILE --reason ...`)")  # fmt: skip
    return None, hint, KV_PATTERNS


def _tag_refused(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"zone {zone}'s tagger could not decode the message at offset {d['offset']} of zone {d['source']}'s "
            f"partition {d['partition']}: its rows are not tagged; find what produced it (no replicator writes "
            "such a message)")  # fmt: skip
    return None, hint, TAGGER


def _primary_changed(zone: str, d: dict, alert: dict, zones) -> tuple:
    address = d["address"]
    hint = (f"the server at {address} (server_id {d.get('server_id')}) is not the one zone {zone}'s capture was "
            "reading, and nothing is read there: if it is the promoted replica, map capture onto it")  # fmt: skip
    return command("zones", "set-primary", zone, address, "--reason", _why(alert)), hint, FAILOVER


def _primary_promoted(zone: str, d: dict, alert: dict, zones) -> tuple:
    # (no other alert kind is named here: `zonesync alerts` is read for them after a failover)
    hint = (f"zone {zone}'s capture now reads {d['to']}: point ZONESYNC_ZONE_{zone.upper()}_URL, the Airflow "
            f"connections and the guards at it, then look at `zonesync lag` and `zonesync reconcile --zone "
            f"{zone}`")  # fmt: skip
    return command("zones", "primaries", zone), hint, FAILOVER


def _failover_lost(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"the old primary's transactions {d['lost']} are not in zone {zone} but may be in the others: "
            "compare every zone, then repair what differs (--repair sets each row to its owner's)")  # fmt: skip
    return command("check", "--reason", _why(alert)), hint, FAILOVER


def _binlog_unreadable(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"zone {zone}'s replicator cannot read its binlog from {d['checkpoint']}: restore the file if you can "
            "(it keeps asking every 5 s); otherwise give its changes up with this, then repair every other zone "
            "with the copies it prints")  # fmt: skip
    return command("binlog", "skip-lost", "--zone", zone, "--reason", _why(alert)), hint, RETENTION


def _binlog_skipped(zone: str, d: dict, alert: dict, zones) -> tuple:
    others = [z for z in zones if z != zone]
    hint = (f"zone {zone}'s changes from {d['from']} to {d['to']} reached no other zone: each needs a repair copy "
            f"from zone {zone}, one after the other")  # fmt: skip
    copies = [command("copy", "--from", zone, "--to", z, "--mode", "repair", "--reason", _why(alert)) for z in others]
    return (" && ".join(copies) or None), hint, COPY


def _no_checkpoint(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"zone {zone} was captured before but its checkpoints are gone: restore them if you can; otherwise set "
            "where capture starts (`current`: the binlog's end; or --at FILE:POS), then rebuild its consumers "
            "with repair copies")  # fmt: skip
    return command("binlog", "bootstrap", "--zone", zone, "--at", "current"), hint, CAPTURE


def _binlog_settings(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"zone {zone}'s server cannot be captured whole: set what the detail names (log_bin, ROW events, "
            "FULL row images and metadata), then start its replicator again")  # fmt: skip
    return None, hint, CAPTURE


def _server_id_clash(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"another binlog reader ({d['other_reader']}) uses server_id {d['server_id']}: stop it, or start zone "
            f"{zone}'s replicator with an unused id (`zonesync replicate --zone {zone} --server-id N`)")  # fmt: skip
    return None, hint, CAPTURE


def _event_too_large(zone: str, d: dict, alert: dict, zones) -> tuple:
    hint = (f"the event at LSN {d['lsn']} ({d['table']} {d['pk']}) is {d['bytes']} bytes, over the broker's "
            "message limit: raise the producer's and the broker's message.max.bytes above it; the replicator "
            "tries again every 5 s")  # fmt: skip
    return None, hint, FAULTS


KINDS: dict[str, Callable[[str, dict, dict, tuple], tuple]] = {
    "row_locked": _row_locked,
    "partition_halted": _partition_halted,
    "table_held": _table_held,
    "table_resumed": _table_resumed,
    "lag_warning": _lag_warning,
    "count_mismatch": _count_mismatch,
    "consistency_mismatch": _consistency_mismatch,
    "kv_ambiguous": _kv_ambiguous,
    "kv_untaggable": _kv_untaggable,
    "tag_refused": _tag_refused,
    "primary_changed": _primary_changed,
    "primary_promoted": _primary_promoted,
    "failover_lost_transactions": _failover_lost,
    "binlog_unreadable": _binlog_unreadable,
    "binlog_skipped": _binlog_skipped,
    "no_checkpoint": _no_checkpoint,
    "binlog_settings": _binlog_settings,
    "server_id_clash": _server_id_clash,
    "event_too_large": _event_too_large,
}


def generic(alert: dict) -> dict:
    """A kind with no runbook here, or a detail without what its runbook needs."""
    detail = alert.get("detail")
    action = detail.get("action") if isinstance(detail, dict) else None
    ack = f"zonesync alerts --ack {alert['id']}" if alert.get("id") is not None else "zonesync alerts --ack ID"
    hint = f"{action}; then acknowledge it (`{ack}`)" if action else f"read its detail, fix the cause, then `{ack}`"
    return {"resolve": None, "hint": hint, "doc": GENERIC}


def advice(alert: dict, zones: Iterable[str] = ()) -> dict:
    """{"resolve": the command or None, "hint": one line, "doc": "docs/FILE.md#section"} for
    an alert as `meta.alerts.open_alerts` lists it ({id, zone, kind, detail}; the id is
    optional). `zones`: the mesh's zones, for a cure that repeats per other zone."""
    found = KINDS.get(alert.get("kind"))
    detail = alert.get("detail")
    if found is None or not isinstance(detail, dict):
        return generic(alert)
    try:
        resolve, hint, doc = found(str(alert.get("zone")), detail, alert, tuple(zones))
    except (KeyError, TypeError, ValueError):  # a detail of an older shape: nothing to fill in
        return generic(alert)
    return {"resolve": resolve, "hint": hint, "doc": doc}


def annotate(alerts: list[dict], zones: Iterable[str] = ()) -> list[dict]:
    """Each alert with its advice's fields added (resolve, hint, doc)."""
    zones = tuple(zones)
    return [{**a, **advice(a, zones)} for a in alerts]
