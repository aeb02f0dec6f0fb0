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
    "body VARCHAR(64) NOT NULL, written_at DATETIME(6) NULL, _zs_origin SMALLINT NOT NULL DEFAULT 0, "
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
        _each_zone(zones, "DROP TABLE IF EXISTS notes", "DELETE FROM zonesync.resident_admits")


def note_ids(inst, tenant: int | None = None) -> set[int]:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT note_id FROM notes" + ("" if tenant is None else f" WHERE tenant_id = {int(tenant)}"))
        return {int(r[0]) for r in cur.fetchall()}
