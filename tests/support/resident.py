"""A resident table for tests: `notes`, rows only in their tenant's unit (docs/migration.md,
"Resident tables"), created in every test zone for the tests that ask for it and dropped
after (outside the binlog both ways: the replicators never see the DDL)."""

from __future__ import annotations

import copy
from contextlib import contextmanager

from tests.support.replication import ZONES
from tests.support.rules import BASE
from zonesync.meta.store import MetaStore
from zonesync.rules import parse

NOTES_DDL = (
    "CREATE TABLE IF NOT EXISTS notes (note_id BIGINT NOT NULL PRIMARY KEY, tenant_id BIGINT NOT NULL, "
    "body VARCHAR(64) NOT NULL, written_at DATETIME(6) NULL, seen_at TIMESTAMP(6) NULL, "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, "
    "_zs_version BIGINT NOT NULL DEFAULT 0, KEY idx_notes_tenant (tenant_id)) ENGINE=InnoDB"
)


def resident_rules():
    """The baseline rules plus `notes`, resident, by tenant."""
    doc = copy.deepcopy(BASE)
    doc["tables"]["notes"] = {"column": "tenant_id", "function": "modulo", "buckets": 1024,
                              "entity": {"type": "tenant", "column": "tenant_id"}, "resident": True}  # fmt: skip
    return parse(doc)


def _each_zone(zones, *statements: str) -> None:
    for z in ZONES:
        conn = zones[z].connect("zonesync_app")
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for sql in statements:
                cur.execute(sql)
        conn.commit()
        conn.close()


@contextmanager
def notes_table(zones, meta):
    """`notes` empty in every zone, no admit anywhere, the resident rules published."""
    _each_zone(zones, NOTES_DDL, "DELETE FROM notes", "DELETE FROM zonesync.resident_admits")
    MetaStore(meta).publish_rules(resident_rules(), "test: notes resident")
    try:
        yield
    finally:
        _each_zone(zones, "DROP TABLE IF EXISTS notes", "DELETE FROM zonesync.resident_admits",
                   "DELETE FROM zonesync.row_locks WHERE table_name = 'notes'",
                   "DELETE FROM zonesync.tombstones WHERE table_name = 'notes'")  # fmt: skip


def note_ids(inst, tenant: int | None = None) -> set[int]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT note_id FROM notes" + ("" if tenant is None else f" WHERE tenant_id = {int(tenant)}"))
        return {int(r[0]) for r in cur.fetchall()}


def note_rows(inst, tenant: int) -> list[tuple]:
    """(note_id, body, written_at, seen_at) of a tenant's notes, read under time_zone '+00:00'."""
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"SELECT note_id, body, written_at, seen_at FROM notes WHERE tenant_id = {int(tenant)} ORDER BY 1")
        return list(cur.fetchall())


@contextmanager
def server_time_zones(zones, by_zone: dict[str, str]):
    """Each zone's server time zone (its global time_zone, what a new session starts with)
    set as given, then put back."""
    before = {}
    for z, tz in by_zone.items():
        with zones[z].connect().cursor() as cur:
            cur.execute("SELECT @@global.time_zone")
            before[z] = cur.fetchone()[0]
            cur.execute("SET GLOBAL time_zone = %s", (tz,))
    try:
        yield
    finally:
        for z, tz in before.items():
            with zones[z].connect().cursor() as cur:
                cur.execute("SET GLOBAL time_zone = %s", (tz,))
