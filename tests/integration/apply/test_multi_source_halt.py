"""Multi-source into one zone (S003-39): zone b's applier consumes a's and c's topics at
once; a halted partition of source a (its events name a table b does not have) stops
only that (source, partition): source c keeps flowing into b, its own partition of the
same number included, with per-key order kept."""

from __future__ import annotations

import time

import pytest

from tests.support.background import Background, wait_until
from tests.support.replication import Cluster, reset_state
from zonesync.events import partition_of

pytestmark = pytest.mark.integration

PARTITIONS = 4
TABLE_DDL = (
    "CREATE TABLE zonesync_app.only_in_a (id BIGINT PRIMARY KEY, v VARCHAR(10), "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)"
)


class CWriter(Background):
    """Zone c's own writes, until stopped: a new tenant (2000, 2001, ...) per step, and tenant
    1000 updated each step with a higher version (per-key order)."""

    name = "c-writer"

    def __init__(self, conn, first: int):
        super().__init__()
        self.conn = conn
        self.next = first
        self.steps = 0

    def _run(self) -> None:
        with self.conn.cursor() as cur:
            while not self._stop.is_set():
                cur.execute(
                    "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
                    "VALUES (%s, 'c', 3, 1)",
                    (self.next,),
                )
                self.next += 1
                self.steps += 1
                cur.execute(
                    "UPDATE zonesync_app.tenants SET name = %s, _zs_version = _zs_version + 1 WHERE tenant_id = 1000",
                    (f"s{self.steps}",),
                )
                time.sleep(0.03)


def _count(conn, sql: str, args=()) -> int:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def _states(b, source: str) -> dict[int, str]:
    with b.cursor() as cur:
        cur.execute("SELECT partition_no, status FROM zonesync.apply_state WHERE source_zone = %s", (source,))
        return {int(p): s for p, s in cur.fetchall()}


def test_a_halt_on_one_source_leaves_the_other_source_flowing(zones, meta, broker, test_cfg):
    reset_state(zones, meta)
    a, b, c = (zones[z].connect() for z in ("a", "b", "c"))
    for conn in (a, b, c):
        conn.autocommit(True)
    with a.cursor() as cur:  # a table only zone a has (not logged: b never hears of it)
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DROP TABLE IF EXISTS zonesync_app.only_in_a")
        cur.execute(TABLE_DDL)
        cur.execute("SET SESSION sql_log_bin = 1")
    halted = partition_of("only_in_a", "[1]", PARTITIONS)
    # a's tenants in the halted partition (held behind the halt) and in the others (flowing)
    a_keys = [t for t in range(1, 400)]
    a_held = [t for t in a_keys if partition_of("tenants", f"[{t}]", PARTITIONS) == halted][:3]
    a_free = [t for t in a_keys if partition_of("tenants", f"[{t}]", PARTITIONS) != halted][:3]
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    c_rows = "SELECT COUNT(*) FROM zonesync_app.tenants WHERE _zs_origin = 3"
    try:
        cluster.start(zones=("a", "c"), which=("replicator",))
        cluster.start(zones=("b",), which=("applier",))
        cluster.wait_started()
        with c.cursor() as cur:
            cur.execute("INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
                        "VALUES (1000, 's0', 3, 1)")  # fmt: skip
        with a.cursor() as cur:
            cur.execute("INSERT INTO zonesync_app.only_in_a VALUES (1, 'x', 1, 1)")
        wait_until(lambda: _states(b, "a").get(halted) == "halted", 30, f"a's partition {halted} halted in b")
        with a.cursor() as cur:  # after the halt: a's rows behind it wait, the others land
            for t in a_held + a_free:
                cur.execute(
                    "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) "
                    "VALUES (%s, 'a', 1, 1)",
                    (t,),
                )

        with CWriter(c, 2000) as writer:
            seen = []  # c's rows in b, sampled while a's partition stays halted
            for _ in range(4):
                time.sleep(1.0)
                seen.append(_count(b, c_rows))
                assert _states(b, "a").get(halted) == "halted", "the halt holds throughout"
            assert cluster.threads["applier-b"].is_alive()
        assert seen == sorted(seen) and seen[-1] > seen[0] > 0, f"c's rows keep arriving in b during the halt: {seen}"
        c_keys = [1000, *range(2000, writer.next)]
        assert any(partition_of("tenants", f"[{t}]", PARTITIONS) == halted for t in c_keys), (
            "some of c's rows share the halted partition's number"
        )
        total = len(c_keys)  # and every one of them lands, 1000's last update included
        wait_until(lambda: _count(b, c_rows) == total, 20, f"all {total} of c's rows in b")
        with b.cursor() as cur:
            cur.execute("SELECT name, _zs_version FROM zonesync_app.tenants WHERE tenant_id = 1000")
            assert cur.fetchone() == (f"s{writer.steps}", writer.steps + 1), "c's updates of one key applied in order"
        wait_until(
            lambda: (
                _count(b, "SELECT COUNT(*) FROM zonesync_app.tenants WHERE tenant_id IN %s", (a_free,)) == len(a_free)
            ),
            20,
            "a's rows of its running partitions in b",
        )
        assert _count(b, "SELECT COUNT(*) FROM zonesync_app.tenants WHERE tenant_id IN %s", (a_held,)) == 0, (
            "a's rows behind the halted partition are not applied past it"
        )
        assert set(_states(b, "c").values()) == {"running"}, _states(b, "c")
        assert [p for p, s in _states(b, "a").items() if s == "halted"] == [halted]
    finally:
        cluster.stop()
        for conn in (a, b):
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute("DROP TABLE IF EXISTS zonesync_app.only_in_a")
        for conn in (a, b, c):
            conn.close()
        reset_state(zones, meta)
