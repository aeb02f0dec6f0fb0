"""Events for a table the target zone does not have (S001-17) are never dropped and never
retried forever: the partitions that carried them halt with an alert naming the table,
and every other partition goes on. Once the table exists, `zonesync resume` sets them
running and the applier takes them back."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.replication import Cluster, reset_state
from zonesync.apply.tools import progress
from zonesync.events import partition_of

pytestmark = pytest.mark.integration

PARTITIONS = 4


def test_a_missing_table_halts_only_its_partitions(zones, meta, broker, test_cfg):
    reset_state(zones, meta)
    a, b = zones["a"].connect(), zones["b"].connect()
    for conn in (a, b):
        conn.autocommit(True)
    with a.cursor() as cur:  # a table only zone a has (not logged: b never hears of it)
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DROP TABLE IF EXISTS zonesync_app.only_in_a")
        cur.execute("CREATE TABLE zonesync_app.only_in_a (id BIGINT PRIMARY KEY, v VARCHAR(10), "
                    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)")  # fmt: skip
        cur.execute("SET SESSION sql_log_bin = 1")  # its rows are logged
    halted = partition_of("only_in_a", "[1]", PARTITIONS)
    tenants = [t for t in range(1, 200) if partition_of("tenants", f"[{t}]", PARTITIONS) != halted][:20]
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    try:
        cluster.start(zones=("a",), which=("replicator",))
        cluster.start(zones=("b",), which=("applier",))
        cluster.wait_started()
        with a.cursor() as cur:
            cur.execute("INSERT INTO zonesync_app.only_in_a VALUES (1, 'x', 1, 1)")
            for t in tenants:
                cur.execute(
                    "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
                    "VALUES (%s, 'a', 1, 1)",
                    (t,),
                )
        deadline = time.monotonic() + 30
        while True:
            with b.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM zonesync_app.tenants")
                arrived = cur.fetchone()[0]
                cur.execute("SELECT partition_no, status, detail FROM zonesync.apply_state WHERE source_zone = 'a'")
                states = {p: (s, d) for p, s, d in cur.fetchall()}
            if arrived == len(tenants) and states.get(halted, ("",))[0] == "halted":
                break
            assert time.monotonic() < deadline, (
                f"{arrived} of {len(tenants)} rows, apply_state {states}, "
                f"published {cluster.replicators['a'].published}"
            )
            time.sleep(0.2)
        assert [p for p, (s, _) in states.items() if s == "halted"] == [halted], "only the table's partition"
        assert "only_in_a" in states[halted][1]
        with meta.connect().cursor() as cur:
            cur.execute("SELECT detail FROM alerts WHERE zone = 'b' AND kind = 'partition_halted'")
            alerts = [json.loads(r[0]) for r in cur.fetchall()]
        assert [(d["partition"], d["table"]) for d in alerts] == [(halted, "only_in_a")]
        assert cluster.threads["applier-b"].is_alive()

        # the fix: create the table, resume the partition; the running applier takes it back
        with b.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("CREATE TABLE zonesync_app.only_in_a (id BIGINT PRIMARY KEY, v VARCHAR(10), "
                        "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)")  # fmt: skip
        assert progress.resume(b, "a", [halted + 1]) == [], "only halted partitions are resumed"
        assert progress.resume(b, "a") == [halted]
        deadline = time.monotonic() + 30
        while True:
            with b.cursor() as cur:
                cur.execute("SELECT v FROM zonesync_app.only_in_a WHERE id = 1")
                row = cur.fetchone()
                cur.execute("SELECT status FROM zonesync.apply_state WHERE source_zone = 'a' AND partition_no = %s",
                            (halted,))  # fmt: skip
                status = cur.fetchone()[0]
            if row == ("x",):
                break
            assert time.monotonic() < deadline, f"the resumed partition did not apply (status {status})"
            time.sleep(0.2)
        assert status == "running"
    finally:
        cluster.stop()
        with a.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS zonesync_app.only_in_a")
        with b.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS zonesync_app.only_in_a")
        a.close()
        b.close()
        reset_state(zones, meta)
