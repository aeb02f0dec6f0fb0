"""Fixtures of the consistency-check tests: a table of many column types in every zone,
declared in the rules, and the job's arguments."""

from __future__ import annotations

import argparse

import pytest

from tests.integration.copy.conftest import zone_args
from tests.support.replication import ZONES, reset_state
from tests.support.rules import BASE, meta_url, rules_doc
from zonesync.check.request import CheckRequest
from zonesync.check.steps import CheckContext
from zonesync.meta.store import MetaStore

TABLE = "check_types"
DDL = f"""CREATE TABLE {TABLE} (
    id BIGINT NOT NULL PRIMARY KEY,
    tenant_id BIGINT NOT NULL,
    name VARCHAR(40) NULL,
    note VARCHAR(40) NULL,
    at_dt DATETIME(6) NULL,
    at_ts TIMESTAMP(6) NULL,
    amount DECIMAL(12,3) NULL,
    blob_v BLOB NULL,
    _zs_origin SMALLINT NOT NULL DEFAULT 1,
    _zs_version BIGINT NOT NULL DEFAULT 1
) ENGINE=InnoDB"""


def sql(inst, *statements, fetch=False):
    conn = inst.connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for s in statements:
                cur.execute(s)
            out = cur.fetchall() if fetch else None
        conn.commit()
        return out
    finally:
        conn.close()


@pytest.fixture
def types_table(zones, meta):
    """check_types with the same `rows` rows in a, b and c (not replicated: each zone
    written directly), declared in the rules, no replication state; dropped after."""

    def fill(rows: int) -> None:
        for z in ZONES:
            sql(zones[z], f"DROP TABLE IF EXISTS {TABLE}", DDL, "SET time_zone = '+00:00'",
                f"INSERT INTO {TABLE} SELECT seq, seq % 1024, CONCAT('name ', seq), '', '2026-01-01 10:00:00', "
                f"'2026-01-01 10:00:00', seq / 4, UNHEX(CONCAT('00FF', HEX(seq))), 1, 1000 + seq "
                f"FROM seq_1_to_{rows}")  # fmt: skip

    reset_state(zones, meta)  # no replication state of an earlier test in the event counts
    tables = {**BASE["tables"], TABLE: {"column": "tenant_id", "function": "modulo", "buckets": 1024}}
    MetaStore(meta).publish_rules(rules_doc(tables=tables), f"test: {TABLE} is replicated")
    meta.run("DELETE FROM check_diffs")
    meta.run("DELETE FROM check_chunks")
    meta.run("DELETE FROM checks")
    yield fill
    for z in ZONES:
        sql(zones[z], f"DROP TABLE IF EXISTS {TABLE}")
    MetaStore(meta).publish_rules(rules_doc(), "test: the baseline tables again")


def context(meta, zones, run_id: str, **request) -> CheckContext:
    req = CheckRequest(**{"tables": (TABLE,), "chunk_rows": 500, "reason": "test", **request})
    return CheckContext(meta, run_id, req, lambda z: zones[z].connect("zonesync_app"), actor="test")


def job_args(meta, zones, tmp_path, run_id: str, **kw) -> argparse.Namespace:
    return argparse.Namespace(
        run_id=run_id,
        table=kw.pop("tables", [TABLE]),
        parallel=kw.pop("parallel", 4),
        rows=kw.pop("rows", True),
        settle_timeout_s=kw.pop("settle_timeout_s", 1.0),
        max_lag_s=kw.pop("max_lag_s", 0.0),
        stop_after=kw.pop("stop_after", 0),
        meta=meta_url(meta),
        output=str(tmp_path / f"{run_id}.json"),
        **zone_args(zones),
        **kw,
    )
