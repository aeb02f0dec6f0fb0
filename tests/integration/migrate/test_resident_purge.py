"""Declaring an existing table resident (issue 22; docs/migration.md, "Resident tables"):
`notes` was replicated, so every zone holds every tenant's notes; once the rules make it
resident, `zonesync resident purge` leaves each zone its own tenants' notes (and those of
tenants registered nowhere), deleting the rest as a maintenance write no replicator
publishes, never the only copy."""

from __future__ import annotations

import contextlib
import copy
import io
import json

import pytest
import yaml
from pymysqlreplication.event import MariadbGtidEvent
from pymysqlreplication.row_event import DeleteRowsEvent

from tests.support.binlog import open_stream, position
from tests.support.replication import ZONES
from tests.support.resident import NOTES_DDL, resident_rules
from tests.support.rules import BASE, rules_doc
from zonesync import cli
from zonesync.meta.entities import EntityRegistry
from zonesync.meta.store import MetaStore
from zonesync.migrate import resident

pytestmark = pytest.mark.integration

HOME = {"11": "a", "12": "b", "13": "c"}  # tenant -> its registered unit; tenant 14 is registered nowhere
NOTES = {11: range(1, 6), 12: range(6, 9), 13: range(9, 13), 14: range(13, 15)}  # tenant -> its note ids
SKIP_REPLICATION = 0x8000  # a MariaDB GTID event's flag: the transaction ran with skip_replication


def _sql(inst, *statements: str, args=None) -> None:
    """Statements outside the binlog (what the mesh's replication left, or a test's fixing up)."""
    conn = inst.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for sql in statements:
            cur.execute(sql, args)
    conn.commit()
    conn.close()


def _insert(inst, rows: list[tuple[int, int]]) -> None:
    conn = inst.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.executemany("INSERT INTO notes (note_id, tenant_id, body, _zs_origin, _zs_version) "
                        "VALUES (%s, %s, 'x', 1, 1)", rows)  # fmt: skip
    conn.commit()
    conn.close()


def _replicated_everywhere(zones) -> None:
    """Every zone holds every tenant's notes, as the mesh left them."""
    for z in ZONES:
        _sql(zones[z], "DELETE FROM notes", "DELETE FROM zonesync.resident_admits")
        _insert(zones[z], [(n, t) for t, ids in NOTES.items() for n in ids])


def _notes(inst) -> dict[int, set[int]]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT tenant_id, note_id FROM notes")
        out: dict[int, set[int]] = {}
        for t, n in cur.fetchall():
            out.setdefault(int(t), set()).add(int(n))
        return out


def _own(zone: str) -> dict[int, set[int]]:
    """What a zone holds once purged: its own tenants' notes and the unregistered tenant's."""
    return {t: set(ids) for t, ids in NOTES.items() if HOME.get(str(t), zone) == zone}


def _purge(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["resident", "purge", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _forget(meta) -> None:
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type = 'tenant' AND le_id IN ('11', '12', '13', '14')")
    meta.run("DELETE FROM biz_entities WHERE be_type = 'tenant' AND be_id IN ('11', '12', '13', '14')")


@pytest.fixture(scope="module")
def replicated_notes(zones, meta):
    """`notes` replicated (declared in the rules, not resident), every tenant's notes in every
    zone; tenants 11, 12, 13 registered in a, b, c, tenant 14 nowhere."""
    _forget(meta)
    for z in ZONES:
        _sql(zones[z], NOTES_DDL)
    doc = copy.deepcopy(BASE)
    doc["tables"]["notes"] = {"column": "tenant_id", "function": "modulo", "buckets": 1024,
                              "entity": {"type": "tenant", "column": "tenant_id"}}  # fmt: skip
    from zonesync.rules import parse

    MetaStore(meta).publish_rules(parse(doc), "test: notes replicated")
    registry = EntityRegistry(meta)
    for t, zone in HOME.items():
        registry.register_biz("tenant", t, zone, [("tenant", t)], f"test: tenant {t} in {zone}", new=True)
    _replicated_everywhere(zones)
    yield
    _forget(meta)
    for z in ZONES:
        _sql(zones[z], "DROP TABLE IF EXISTS notes", "DELETE FROM zonesync.resident_admits",
             "DELETE FROM zonesync.tombstones WHERE table_name = 'notes'")  # fmt: skip
    MetaStore(meta).publish_rules(rules_doc(), "test: baseline again")


@pytest.fixture(scope="module")
def notes_resident(replicated_notes, meta, tmp_path_factory):
    """The rules published by `zonesync rules apply`, making `notes` resident: {"before": a
    purge's (exit code, stdout, stderr) while notes was still replicated, "apply": what the
    publish printed}."""
    path = tmp_path_factory.mktemp("purge") / "rules.yaml"
    path.write_text(yaml.safe_dump(resident_rules().to_doc()))
    seen = {}
    for name, argv in (
        ("before", ["resident", "purge", "--table", "notes", "--reason", "r"]),
        ("apply", ["rules", "apply", str(path), "--no-wait", "--reason", "test: notes resident"]),
    ):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        seen[name] = (code, out.getvalue(), err.getvalue())
    return seen


def test_bad_requests_are_refused_in_one_line_and_change_nothing(notes_resident, zones, meta, capsys):
    """Each bad request names its flag and the fix, exit 2; the zones keep every note."""
    _replicated_everywhere(zones)
    before = {z: _notes(zones[z]) for z in ZONES}
    code, out, err = notes_resident["before"]  # not resident yet (the rules still replicated it)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith("zonesync resident purge: --table: notes is not resident in the newest rules"), err
    refused = {
        ("--reason", "r"): "--table: required",
        ("--table", "nope", "--reason", "r"): "--table: 'nope' is not a table of the newest rules",
        ("--table", "orders", "--reason", "r"): "--table: orders is not resident in the newest rules",
        ("--table", "notes", "--zone", "q", "--reason", "r"): "--zone: unknown zone 'q' (zones: a, b, c)",
        ("--table", "notes"): "--reason: required",
        ("--table", "notes", "--reason", " "): "--reason: required",
    }
    for args, message in refused.items():
        code, out, err = _purge(capsys, *args)
        assert (code, out) == (2, "") and err.count("\n") == 1, (args, out, err)
        assert err.startswith(f"zonesync resident purge: {message}"), (args, err)
    # a migration of a tenant runs: its notes are in flight
    meta.run(
        "INSERT INTO migrations (run_id, be_type, be_id, source_zone, target_zone, mode, les_json, reason, "
        "actor) VALUES ('mig-12', 'tenant', '12', 'b', 'c', 'plan1', %s, 't', 't')",
        ('[["tenant", "12"]]',),
    )
    try:
        code, out, err = _purge(capsys, "--table", "notes", "--reason", "r")
        assert (code, out) == (2, "") and err.count("\n") == 1, err
        assert "--table: migration mig-12 (tenant 12, b -> c) moves tenant entities" in err, err
    finally:
        meta.run("DELETE FROM migrations")
    assert {z: _notes(zones[z]) for z in ZONES} == before


def test_publishing_resident_rules_hints_at_the_purge(notes_resident):
    code, out, err = notes_resident["apply"]
    assert code == 0, err
    assert "notes is resident now, but every zone still holds the other units' rows it replicated: " \
           "`zonesync resident purge --table notes --dry-run`" in out, out  # fmt: skip


def test_a_dry_run_reports_per_zone_and_owner_and_changes_nothing(notes_resident, zones, capsys):
    _replicated_everywhere(zones)
    before = {z: _notes(zones[z]) for z in ZONES}
    code, out, err = _purge(capsys, "--table", "notes", "--dry-run")
    assert (code, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[0].startswith("resident purge notes (tenant by tenant_id, rules version ") and "dry run" in lines[0]
    assert "zone a: 7 rows would go (b: 3 rows of 1 tenant, c: 4 rows of 1 tenant); 5 rows of its own tenants " \
           "stay" in lines, out  # fmt: skip
    assert "zone b: 9 rows would go (a: 5 rows of 1 tenant, c: 4 rows of 1 tenant); 3 rows of its own tenants " \
           "stay" in lines, out  # fmt: skip
    assert "zone c: 8 rows would go (a: 5 rows of 1 tenant, b: 3 rows of 1 tenant); 4 rows of its own tenants " \
           "stay" in lines, out  # fmt: skip
    unregistered = [line for line in lines if "registered nowhere" in line]
    assert len(unregistered) == 3 and all("2 rows of 1 tenant(s) registered nowhere stay (tenant 14)" in line
                                          for line in unregistered), out  # fmt: skip
    assert {z: _notes(zones[z]) for z in ZONES} == before


def _deletes(inst, start, server_id: int) -> list[tuple[str, int, bool]]:
    """(table, rows, the transaction's skip_replication flag) of each delete event since `start`."""
    stream = open_stream(inst, start, server_id, [MariadbGtidEvent, DeleteRowsEvent])
    out, flags = [], 0
    try:
        for ev in stream:
            if isinstance(ev, MariadbGtidEvent):
                flags = ev.packet.flags
            else:
                out.append((ev.table, len(ev.rows), bool(flags & SKIP_REPLICATION)))
    finally:
        stream.close()
    return out


def test_the_purge_leaves_each_zone_its_own_tenants_notes_unpublished_and_a_rerun_changes_nothing(
    notes_resident, zones, meta, capsys
):
    """Each zone keeps exactly its tenants' notes and tenant 14's (reported); every delete
    ran with skip_replication (no replicator publishes it: the other zones keep their
    tenants' notes) in chunks of at most --batch rows, with no tombstone; audited with the
    reason; a second run deletes nothing."""
    _replicated_everywhere(zones)
    starts = {}
    for z in ZONES:
        with zones[z].connect() as conn:
            starts[z] = position(conn)
    code, out, err = _purge(capsys, "--table", "notes", "--reason", "test: issue 22", "--batch", "2")
    assert (code, err) == (0, ""), err
    assert "zone a: deleted 7 rows (b: 3 rows of 1 tenant, c: 4 rows of 1 tenant); 5 rows of its own tenants " \
           "stay" in out.splitlines(), out  # fmt: skip
    for i, z in enumerate(ZONES):
        assert _notes(zones[z]) == _own(z), z
        deletes = _deletes(zones[z], starts[z], 4401 + i)
        assert deletes and all(table == "notes" and flagged for table, _, flagged in deletes), (z, deletes)
        assert max(n for _, n, _ in deletes) <= 2, deletes  # chunks of --batch rows
        assert sum(n for _, n, _ in deletes) == sum(len(ids) for ids in NOTES.values()) - sum(
            len(ids) for ids in _own(z).values()
        )
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM zonesync.tombstones WHERE table_name = 'notes'")
            assert cur.fetchone()[0] == 0
    rows, _ = meta.run("SELECT detail FROM audit_log WHERE action = 'resident.purge' ORDER BY id DESC LIMIT 1")
    detail = json.loads(rows[0][0])
    assert detail["reason"] == "test: issue 22" and detail["table"] == "notes", detail
    assert detail["zones"]["a"]["deleted"] == {"b": 3, "c": 4} and detail["zones"]["a"]["unregistered"] == {"14": 2}
    # again: nothing left to delete, nothing written
    for z in ZONES:
        with zones[z].connect() as conn:
            starts[z] = position(conn)
    code, out, err = _purge(capsys, "--table", "notes", "--reason", "test: again")
    assert (code, err) == (0, "") and "zone b: deleted 0 rows; 3 rows of its own tenants stay" in out, out
    for i, z in enumerate(ZONES):
        assert _notes(zones[z]) == _own(z)
        assert _deletes(zones[z], starts[z], 4411 + i) == []


def test_a_purge_killed_part_way_converges_when_run_again(notes_resident, zones, capsys):
    """A purge stopped after its first chunks (as a killed one is) left c part-way; the next
    run finishes it."""
    _replicated_everywhere(zones)
    chunks = []

    def killed(cur):
        chunks.append(1)
        if len(chunks) > 2:
            raise KeyboardInterrupt  # the process ends here

    conn = zones["c"].connect("zonesync_app")
    with pytest.raises(KeyboardInterrupt):
        resident.purge(conn, {"notes": "tenant_id IN (11, 12)"}, 2, killed)
    conn.rollback()
    conn.close()
    left = _notes(zones["c"])
    assert 0 < len(left[11]) + len(left.get(12, ())) < 8, left  # part-way
    code, out, err = _purge(capsys, "--table", "notes", "--zone", "c", "--reason", "test: resumed", "--batch", "2")
    assert (code, err) == (0, ""), err
    assert _notes(zones["c"]) == _own("c")
    assert _notes(zones["a"]) == _notes(zones["b"]) == {t: set(ids) for t, ids in NOTES.items()}  # --zone c only


def test_an_owner_short_of_rows_keeps_the_entity_s_rows_and_the_purge_exits_1(notes_resident, zones, capsys):
    """c holds six notes of tenant 11, its owner a only five: c's may be the only copies of
    one, so they stay (reported, exit 1); tenant 12's copies in c go all the same."""
    _replicated_everywhere(zones)
    _insert(zones["c"], [(100, 11)])
    code, out, err = _purge(capsys, "--table", "notes", "--zone", "c", "--reason", "test: short owner")
    assert code == 1 and err == "", err
    assert ("zone c: skipped tenant 11 (6 rows here): its owner zone a holds only 5 rows, so these may be the only "
            "copy") in out, out  # fmt: skip
    assert "zone c: deleted 3 rows (b: 3 rows of 1 tenant)" in out, out
    assert _notes(zones["c"]) == {11: set(NOTES[11]) | {100}, **_own("c")}


def test_an_entity_a_migration_admits_meanwhile_stops_the_purge(notes_resident, zones, capsys):
    """Tenant 11 admitted in c (a migration bringing it there started after the request was
    checked): the purge stops before deleting any of its rows, exit 1; a re-run, once no
    admit is left, finishes."""
    _replicated_everywhere(zones)
    with zones["c"].connect("zonesync_app") as conn:
        resident.admit(conn, "mig-11", "a", [("tenant", "11")])
    code, out, err = _purge(capsys, "--table", "notes", "--zone", "c", "--reason", "test: admitted")
    assert code == 1 and "tenant 11 is admitted in zone c by migration mig-11" in out, out
    assert _notes(zones["c"])[11] == set(NOTES[11])
    with zones["c"].connect("zonesync_app") as conn:
        resident.withdraw(conn, "mig-11")
    code, out, err = _purge(capsys, "--table", "notes", "--zone", "c", "--reason", "test: admitted, again")
    assert code == 0 and _notes(zones["c"]) == _own("c"), out
