"""S002-02 across partitions and S003-24 (product and product_detail, 权重): with
`atomic_transactions`, a source transaction's rows become visible in the target together,
though they hash to partitions of different workers.

Zone a commits transactions that each insert a product and its detail (and later update
both). Their rows land in different partitions, most of them on different workers. A
reader in zone b polls, in single statements (each one snapshot), for a product without
its detail or a detail without its product, and for a product whose detail has another
revision: it never finds one. With table weights and a foreign key from detail to product
in b, each transaction is applied parent first in one target transaction. Zone b ends
equal to zone a, and every event is applied once (reconcile)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.background import wait_until
from tests.support.replication import Cluster, reset_state, settled_reconciliation
from zonesync.apply.tools.reconcile import OK
from zonesync.events import partition_of

pytestmark = pytest.mark.integration

PARTITIONS, WORKERS, PAIRS = 8, 4, 150
FK = ", FOREIGN KEY (product_id) REFERENCES at_product (id)"


def _ddl(fk: bool) -> list[str]:
    return [
        "CREATE TABLE at_product (id BIGINT PRIMARY KEY, rev INT NOT NULL, "
        "_zs_origin SMALLINT NOT NULL DEFAULT 1, _zs_version BIGINT NOT NULL DEFAULT 1)",
        "CREATE TABLE at_detail (id BIGINT PRIMARY KEY, product_id BIGINT NOT NULL, rev INT NOT NULL, "
        f"_zs_origin SMALLINT NOT NULL DEFAULT 1, _zs_version BIGINT NOT NULL DEFAULT 1{FK if fk else ''})",
    ]


@pytest.fixture(params=[False, True], ids=["parallel", "weighted-fk"])
def pairs_env(request, zones, meta, broker, test_cfg):
    """Tables in every zone (b's with the foreign key when weighted); a's replicator, b's
    applier in atomic mode; yields (cluster, weighted)."""
    weighted = request.param
    for z in ("a", "b", "c"):
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS at_detail, at_product")
            for sql in _ddl(fk=weighted and z == "b"):
                cur.execute(sql)
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    weights = {"at_product": 1, "at_detail": 2} if weighted else {}
    try:
        cluster.start(which=("replicator",), zones=("a",))
        cluster.start(which=("applier",), zones=("b",), workers=WORKERS, table_weights=weights,
                      atomic_transactions=True)  # fmt: skip
        cluster.wait_started()
        yield cluster, weighted
    finally:
        cluster.stop()
        for z in ("a", "b", "c"):
            with zones[z].connect("zonesync_app").cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute("DROP TABLE IF EXISTS at_detail, at_product")


def _detail_id(i: int) -> int:
    return 1_000_000 + i


def _write_pairs(conn) -> None:
    """Each transaction: a product and its detail; then each pair updated, both to rev 2."""
    version = time.time_ns() // 1000
    with conn.cursor() as cur:
        for i in range(1, PAIRS + 1):
            conn.begin()
            cur.execute("INSERT INTO at_product (id, rev, _zs_version) VALUES (%s, 1, %s)", (i, version + i))
            cur.execute(
                "INSERT INTO at_detail (id, product_id, rev, _zs_version) VALUES (%s, %s, 1, %s)",
                (_detail_id(i), i, version + i),
            )
            conn.commit()
        for i in range(1, PAIRS + 1):
            conn.begin()
            later = version + PAIRS + i
            cur.execute("UPDATE at_product SET rev = 2, _zs_version = %s WHERE id = %s", (later, i))
            cur.execute("UPDATE at_detail SET rev = 2, _zs_version = %s WHERE id = %s", (later, _detail_id(i)))
            conn.commit()


TORN = (
    "SELECT (SELECT COUNT(*) FROM at_product p LEFT JOIN at_detail d ON d.product_id = p.id WHERE d.id IS NULL) "
    "+ (SELECT COUNT(*) FROM at_detail d LEFT JOIN at_product p ON p.id = d.product_id WHERE p.id IS NULL) "
    "+ (SELECT COUNT(*) FROM at_product p JOIN at_detail d ON d.product_id = p.id WHERE d.rev <> p.rev)"
)


def _rows(inst) -> list:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT p.id, p.rev, d.id, d.rev FROM at_product p LEFT JOIN at_detail d ON d.product_id = p.id")
        return sorted(cur.fetchall())


def test_a_transactions_rows_in_several_partitions_become_visible_together(pairs_env, zones, meta):
    cluster, weighted = pairs_env
    spanning = sum(
        partition_of("at_product", f"[{i}]", PARTITIONS) % WORKERS
        != partition_of("at_detail", f"[{_detail_id(i)}]", PARTITIONS) % WORKERS
        for i in range(1, PAIRS + 1)
    )
    assert spanning > PAIRS // 2, "most pairs are split between workers"
    torn, polls, done = [], [0], threading.Event()

    def read():
        conn = zones["b"].connect("zonesync_app")
        conn.autocommit(True)
        with conn.cursor() as cur:
            while not done.is_set():
                cur.execute(TORN)
                (n,) = cur.fetchone()
                polls[0] += 1
                if n:
                    torn.append(n)
        conn.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    a = zones["a"].connect("zonesync_app")
    try:
        _write_pairs(a)
        wait_until(lambda: _rows(zones["b"]) == _rows(zones["a"]), 60, "b has a's pairs")
    finally:
        done.set()
        reader.join(10)
        a.close()
    assert polls[0] > 20, "the reader watched the whole catch-up"
    assert torn == [], f"a reader in b saw a transaction in part {len(torn)} times (max {max(torn)} rows)"
    assert len(_rows(zones["b"])) == PAIRS and all(r[1] == r[3] == 2 for r in _rows(zones["b"]))
    rows = settled_reconciliation(meta, zones, "b", ["a"], timeout=20)
    assert rows and all(r.status == OK for r in rows), rows
    assert cluster.appliers["b"].applied == 4 * PAIRS
