"""Fixtures of the full-copy tests: zone JDBC arguments for the Spark job, clean copy state."""

from __future__ import annotations

import argparse

import pytest

from tests.support.replication import ZONES


def zone_args(zones, names=ZONES) -> dict:
    """The Spark jobs' --zone / --zone-user arguments for the test zones."""
    return {
        "zone": [f"{z}=jdbc:mysql://127.0.0.1:{zones[z].port}/zonesync_app" for z in names],
        "zone_user": [f"{z}=root" for z in names],
    }


def copy_args(zones, tmp_path, run_id: str, source: str, target: str, tables=("tenants",), **kw) -> argparse.Namespace:
    names = kw.pop("names", ZONES)
    return argparse.Namespace(
        run_id=run_id,
        source=source,
        target=target,
        table=list(tables),
        chunk_rows=kw.pop("chunk_rows", 500),
        parallel=kw.pop("parallel", 2),
        stop_after=kw.pop("stop_after", 0),
        output=str(tmp_path / f"{run_id}.json"),
        **zone_args(zones, names),
        **kw,
    )


@pytest.fixture
def clean_copies(zones, meta):
    """No copy state in meta or any zone, before and after."""

    def clean():
        for z in ZONES:
            conn = zones[z].connect()
            with conn.cursor() as cur:
                cur.execute("DELETE FROM zonesync.copy_tables")
                cur.execute("DELETE FROM zonesync.copy_chunks")
                cur.execute(
                    "SELECT table_name FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'zonesync' "
                    "AND TABLE_NAME LIKE 'copy\\_stage\\_%'"
                )
                for (t,) in cur.fetchall():
                    cur.execute(f"DROP TABLE zonesync.`{t}`")
            conn.close()
        meta.run("DELETE FROM copies")

    clean()
    yield
    clean()
