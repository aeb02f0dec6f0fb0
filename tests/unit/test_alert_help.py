"""What settles each alert kind (console/alert_help.py): the command filled in from the
alert's zone and detail is a real `zonesync` command line (parsed by the command's own
parser, and accepted by the checks it makes of its flags before it runs), the docs
section exists, and every kind the code raises has its advice."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from zonesync.console import alert_help

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
ZONES = ("a", "b", "c")


def alert(kind: str, zone: str, detail: dict, alert_id: int = 7) -> dict:
    return {"id": alert_id, "at": "2026-11-27T15:04:05", "zone": zone, "kind": kind, "detail": detail}


# one alert of each kind, with the detail its raiser records, and the command expected
CASES = [
    (alert("row_locked", "b", {"source": "a", "table": "tenants", "pk": "[201]", "reason": "old row differs"}),
     "zonesync locks resolve --zone b --table tenants --pk '[201]'"),
    (alert("row_locked", "c", {"table": "orders", "pk": '{"order_id": 5}', "reason": "x", "on": "locks resolve"}),
     """zonesync locks resolve --zone c --table orders --pk '{"order_id": 5}'"""),
    (alert("partition_halted", "b", {"source": "a", "partition": 3, "table": "invoices",
                                     "detail": "table invoices is missing in the target or has no primary key"}),
     "zonesync resume --zone b --source a --partition 3"),
    (alert("partition_halted", "c", {"source": "b", "partition": 0, "lsn": 99,
                                     "detail": "orders: unique key x: still in conflict after 30 s"}),
     "zonesync resume --zone c --source b --partition 0"),
    (alert("partition_halted", "b", {"source": "a", "partition": 1, "applied_lsn": 12,
                                     "detail": "malformed message at offset 4: bad"}),
     "zonesync resume --zone b --source a --partition 1"),
    (alert("partition_halted", "b", {"source": "c", "partition": 2, "applied_lsn": 12,
                                     "detail": "resend from LSN 12 impossible: needs full copy"}, 11),
     "zonesync copy --from c --to b --mode repair --reason 'alert 11: partition_halted in zone b'"),
    (alert("partition_halted", "a", {"source": "c", "partition": 2, "applied_lsn": 12,
                                     "detail": "gap after LSN 12 not repaired by 3 resends"}, 12),
     "zonesync copy --from c --to a --mode repair --reason 'alert 12: partition_halted in zone a'"),
    (alert("table_held", "c", {"table": "orders", "detail": "column x unknown"}),
     "zonesync schema resume --zone c --table orders"),
    (alert("table_resumed", "c", {"table": "orders"}), None),
    (alert("lag_warning", "b", {"source": "a", "partition": 4, "behind_events": 900, "behind_seconds": 75.2,
                                "threshold_s": 60.0}),
     "zonesync lag --partitions"),
    (alert("count_mismatch", "b", {"source": "a", "partition": 5, "applied_lsn": 1, "published": 10, "committed": 9,
                                   "action": "compare"}, 3),
     "zonesync check --zones a,b --repair --reason 'alert 3: count_mismatch in zone b'"),
    (alert("consistency_mismatch", "*", {"run_id": "manual__2026", "rows": 4, "tables": {"orders": 2, "tenants": 0},
                                         "schema": {}, "expectations": [], "data_docs": None}, 4),
     "zonesync check --tables orders --repair --reason 'alert 4: consistency_mismatch in zone *'"),
    (alert("consistency_mismatch", "*", {"run_id": "manual__2026", "rows": 0, "tables": {"orders": 0},
                                         "schema": {"orders": "columns differ"}, "expectations": ["x(y): 1"]}),
     "zonesync check report manual__2026"),
    (alert("kv_ambiguous", "a", {"repo": "chats", "key": "t_1_x_1", "patterns": ["p1", "p2"], "by": "kv guard"}), None),
    (alert("kv_ambiguous", "a", {"repo": "chats", "entry": "1-0", "key": "t_1_x_1", "detail": "two match"}), None),
    (alert("kv_untaggable", "a", {"repo": "chats", "entry": "1-0", "key": "zzz", "detail": "no pattern"}), None),
    (alert("tag_refused", "b", {"source": "a", "partition": 2, "offset": 17, "detail": "bad event"}), None),
    (alert("primary_changed", "a", {"address": "10.0.0.8:3306", "server_id": 101, "capture_was_reading": 1,
                                    "action": "zonesync zones set-primary a 10.0.0.8:3306 (docs/failover.md)"}, 5),
     "zonesync zones set-primary a 10.0.0.8:3306 --reason 'alert 5: primary_changed in zone a'"),
    (alert("primary_promoted", "a", {"from": "127.0.0.1:3307", "to": "127.0.0.1:3399", "segment": 1,
                                     "resume_at": "binlog.000003:810", "gtid_pos": "1-1-766", "by": "x"}),
     "zonesync zones primaries a"),
    (alert("failover_lost_transactions", "a", {"from": None, "to": "h:1", "lost": "1-1-767", "action": "x"}, 6),
     "zonesync check --reason 'alert 6: failover_lost_transactions in zone a'"),
    (alert("binlog_unreadable", "a", {"checkpoint": "binlog.000002:4", "error": "purged", "action": "x"}, 8),
     "zonesync binlog skip-lost --zone a --reason 'alert 8: binlog_unreadable in zone a'"),
    (alert("binlog_skipped", "a", {"from": "binlog.000002:4", "to": "binlog.000005:4", "lsn": 3, "reason": "r",
                                   "by": "me", "action": "x"}, 9),
     "zonesync copy --from a --to b --mode repair --reason 'alert 9: binlog_skipped in zone a' && "
     "zonesync copy --from a --to c --mode repair --reason 'alert 9: binlog_skipped in zone a'"),
    (alert("no_checkpoint", "c", {"error": "zone c has no checkpoint"}),
     "zonesync binlog bootstrap --zone c --at current"),
    (alert("binlog_settings", "c", {"error": "binlog_row_image is MINIMAL"}), None),
    (alert("server_id_clash", "b", {"server_id": 4002, "other_reader": "a replica", "action": "x"}), None),
    (alert("event_too_large", "a", {"lsn": 77, "table": "docs", "pk": {"id": 1}, "bytes": 2_000_000}), None),
]  # fmt: skip


@pytest.mark.parametrize(("found", "command"), CASES, ids=[f"{c[0]['kind']}-{i}" for i, c in enumerate(CASES)])
def test_each_kind_has_its_command_filled_in_a_hint_and_a_docs_section(found, command):
    got = alert_help.advice(found, ZONES)
    assert got["resolve"] == command
    assert got["hint"] and "\n" not in got["hint"] and len(got["hint"]) < 400, got["hint"]
    assert got["doc"] != alert_help.GENERIC, "a kind with advice of its own"
    assert _section_exists(got["doc"]), got["doc"]


def _parse(line: str):
    """A command line as the `zonesync` command reads it (its argparse parser): the args."""
    from zonesync.cli import build_parser

    argv = shlex.split(line)
    assert argv[0] == "zonesync", line
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit as exc:  # argparse refuses with exit 2
        raise AssertionError(f"`{line}` does not parse: exit {exc.code}") from None


def _accepted(args) -> None:
    """The checks a command makes of its flags before it does anything (its own code)."""
    from zonesync.cli import check, common, copy, locks, replication, zones

    if args.func is copy.cmd_copy:
        assert not args.command and isinstance(copy._conf(args), dict), copy._conf(args)
    elif args.func is check.cmd_check and not args.command:
        assert isinstance(check._conf(args), dict), check._conf(args)
    elif args.func is check.cmd_check:
        assert args.command[0] == "report" and len(args.command) == 2
    elif args.func is locks.cmd_locks:
        assert args.action == "resolve" and args.table and json.loads(args.pk) is not None
    elif args.func is zones.cmd_zones:
        assert args.command[0] in ("set-primary", "primaries")
        if args.command[0] == "set-primary":
            assert len(args.command) == 3 and common.host_port(args.command[2]), args.command
    else:
        assert args.func.__module__ in (replication.__name__, "zonesync.cli.schema", "zonesync.cli.binlog"), args.func


@pytest.mark.parametrize("command", [c for _, c in CASES if c], ids=[c.split(" --")[0] for _, c in CASES if c])
def test_every_command_is_a_real_command_line_its_parser_and_flag_checks_accept(command):
    for line in command.split(" && "):
        _accepted(_parse(line))


def test_a_row_locked_command_is_the_one_the_locks_table_shows():
    """console/locks.py's command for the same row (the page shows both)."""
    for pk in ([42], [1, "x"]):
        lock_line = f"zonesync locks resolve --zone b --table t --pk '{json.dumps(pk)}'"  # as locks.listed builds it
        pk_text = json.dumps(pk, separators=(",", ":"))  # as the applier's alert carries it (events.pk_text)
        got = alert_help.advice(alert("row_locked", "b", {"source": "a", "table": "t", "pk": pk_text, "reason": "r"}))
        assert got["resolve"] == lock_line


def test_values_are_quoted_for_the_shell():
    got = alert_help.advice(alert("row_locked", "b", {"table": "t", "pk": '["it\'s"]', "reason": "r"}))
    assert shlex.split(got["resolve"])[-1] == '["it\'s"]'


def test_unknown_kinds_and_details_of_another_shape_get_the_generic_advice():
    unknown = alert_help.advice(alert("something_new", "a", {"x": 1}, 31))
    assert unknown == {"resolve": None, "hint": "read its detail, fix the cause, then `zonesync alerts --ack 31`",
                       "doc": alert_help.GENERIC}  # fmt: skip
    with_action = alert_help.advice(alert("capture_fault", "a", {"action": "raise the limit"}, 32))
    assert with_action["resolve"] is None and with_action["hint"].startswith("raise the limit; then acknowledge")
    zone_only = {"no_checkpoint", "binlog_settings"}  # their advice needs nothing of the detail
    for kind in alert_help.KINDS:  # none of them breaks on a detail lacking what it fills in
        for detail in ({}, {"text": "not json"}, "text"):
            got = alert_help.advice({"zone": "a", "kind": kind, "detail": detail})
            if kind in zone_only and isinstance(detail, dict):
                assert got == alert_help.advice(alert(kind, "a", {"error": "e"}, None)), (kind, got)
            else:
                assert got["doc"] == alert_help.GENERIC and "zonesync alerts --ack ID" in got["hint"], (kind, got)
    assert _section_exists(alert_help.GENERIC)
    # binlog_skipped without the mesh's zones: no command to fill in, the hint says what
    alone = alert_help.advice(CASES[21][0])
    assert alone["resolve"] is None and "repair copy" in alone["hint"]


def test_annotate_adds_the_advice_to_each_alert():
    rows = [CASES[0][0], alert("nope", "a", {})]
    got = alert_help.annotate(rows, ZONES)
    assert [a["resolve"] for a in got] == [CASES[0][1], None]
    assert all(a["id"] == r["id"] and a["detail"] == r["detail"] for a, r in zip(got, rows, strict=True))


def test_primary_promoted_names_no_other_alert_kind():
    """After a failover `zonesync alerts` is read for the kinds that must not be there
    (tests/e2e/test_zone_failover.py): the promotion's own advice must not name them."""
    promoted = [c for c, _ in CASES if c["kind"] == "primary_promoted"][0]
    text = " ".join(str(v) for v in alert_help.advice(promoted).values())
    for word in ("row_locked", "partition_halted", "gap", "primary_changed"):
        assert word not in text


RAISED = [
    r"\balert\(\s*\"([a-z_]+)\"",  # self.alert("kind", ...), self._alert("kind", ...)
    r"alerts\.record\(\s*[^,()]+,\s*[^,()]+,\s*\"([a-z_]+)\"",  # alerts.record(meta, zone, "kind", ...)
    r"\.once\(\s*\"([a-z_]+)\"",  # the replicator's FaultReporter
    r"^\s+kind = \"([a-z_]+)\"",  # CaptureFault subclasses
    r"refused\.append\(\(\"([a-z_]+)\"",  # the KV tagger's refusals
]


def test_every_kind_the_code_raises_has_advice():
    found: dict[str, str] = {}
    for path in sorted((REPO / "include" / "zonesync").rglob("*.py")) + sorted((REPO / "plugins").rglob("*.py")):
        text = path.read_text()
        for pattern in RAISED:
            for kind in re.findall(pattern, text, flags=re.MULTILINE):
                found.setdefault(kind, str(path.relative_to(REPO)))
    assert len(found) >= 19 and {"row_locked", "partition_halted", "consistency_mismatch"} <= set(found), found
    missing = {k: p for k, p in found.items() if k not in alert_help.KINDS and k != "capture_fault"}
    assert not missing, f"alert kinds without advice in console/alert_help.py: {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _section_exists(doc: str) -> bool:
    path, _, anchor = doc.partition("#")
    lines = (REPO / path).read_text().splitlines()
    return anchor in {_slug(line.lstrip("#")) for line in lines if re.match(r"#{1,6} ", line)}
