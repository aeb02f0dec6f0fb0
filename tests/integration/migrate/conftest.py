"""Fixtures the migration tests share."""

from __future__ import annotations

import pytest

from tests.support.resident import notes_table
from zonesync.meta.entities import EntityRegistry


@pytest.fixture
def notes(guard_env, zones, meta):
    """`notes` resident in the rules (published before the cluster starts), tenants 7 and 8
    (each its tenant LE) registered in a (a resident row needs a registered entity)."""
    forget_tenants(meta)
    with notes_table(zones, meta):
        for t in ("7", "8"):
            EntityRegistry(meta).register_biz("tenant", t, "a", [("tenant", t)], f"test: tenant {t} in a")
        yield
    forget_tenants(meta)


def forget_tenants(meta) -> None:
    """No migration, no tenant or chat registered (biz entities too: other tests expect an
    unregistered tenant 8 to be refused as unknown)."""
    meta.run("DELETE FROM migrations")
    meta.run("DELETE FROM locating_entities WHERE le_type IN ('tenant', 'chat')")
    meta.run("DELETE FROM biz_entities WHERE be_type = 'tenant' AND be_id <> '7'")
