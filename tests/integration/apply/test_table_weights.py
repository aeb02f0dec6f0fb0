"""Table weights (Otter's 权重): a round is applied lightest table first, so a parent row
lands before the child row that points to it, even when the child came first in the
round. Without weights the same round fails its foreign key check forever."""

from __future__ import annotations

import time

import pytest

from tests.support.background import wait_until
from tests.support.replication import Cluster, reset_state

pytestmark = pytest.mark.integration

DDL = (
    "CREATE TABLE IF NOT EXISTS wt_parent (id BIGINT PRIMARY KEY, _zs_origin SMALLINT NOT NULL DEFAULT 1, "
    "_zs_version BIGINT NOT NULL DEFAULT 1)",
    "CREATE TABLE IF NOT EXISTS wt_child (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL, note VARCHAR(20), "
    "_zs_origin SMALLINT NOT NULL DEFAULT 1, _zs_version BIGINT NOT NULL DEFAULT 1, "
    "FOREIGN KEY (parent_id) REFERENCES wt_parent (id))",
)


@pytest.fixture
def fk_tables(zones):
    for z in ("a", "b", "c"):
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for sql in DDL:
                cur.execute(sql)
    yield
    for z in ("a", "b", "c"):
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS wt_child, wt_parent")


def _write(zone, *statements):
    """One transaction: its events reach the broker as one batch, so the applier gets them
    in one round however loaded the machine is."""
    conn = zone.connect("zonesync_app")
    conn.begin()
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
    conn.commit()
    conn.close()


def _child(zone):
    with zone.connect("zonesync_app").cursor() as cur:
        cur.execute("SELECT parent_id, note FROM wt_child WHERE id = 10")
        return cur.fetchone()


@pytest.mark.parametrize("weights", [{"wt_parent": 1, "wt_child": 2}, {}], ids=["weighted", "unweighted"])
def test_parent_lands_before_child_by_weight(fk_tables, zones, meta, broker, test_cfg, weights):
    reset_state(zones, meta)
    # one partition: the whole round arrives in one fetch, so the unweighted control is deterministic
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=1)
    try:
        cluster.start(which=("replicator",), zones=("a",))
        cluster.start(which=("applier",), zones=("b",), workers=1, table_weights=weights)
        cluster.wait_started()
        v = time.time_ns() // 1000
        _write(
            zones["a"],
            f"INSERT INTO wt_parent (id, _zs_version) VALUES (1, {v})",
            f"INSERT INTO wt_child (id, parent_id, _zs_version) VALUES (10, 1, {v})",
        )
        wait_until(lambda: _child(zones["b"]) == (1, None), 20, "b has the parent and its child")
        cluster.stop("applier-b")
        published = cluster.replicators["a"].published
        # one round for the applier: the child is seen first, then a new parent it moves to
        # (valid in zone a's own order, one transaction)
        _write(
            zones["a"],
            f"UPDATE wt_child SET note = 'seen first', _zs_version = {v + 1} WHERE id = 10",
            f"INSERT INTO wt_parent (id, _zs_version) VALUES (2, {v + 2})",
            f"UPDATE wt_child SET parent_id = 2, _zs_version = {v + 3} WHERE id = 10",
        )
        # all three published (and acked) before the applier is back, so its first fetch has them all
        wait_until(lambda: cluster.replicators["a"].published >= published + 3, 20, "the three changes are published")
        time.sleep(0.5)
        cluster.start(which=("applier",), zones=("b",), workers=1, table_weights=weights)
        landed = wait_until(lambda: _child(zones["b"]) == (2, "seen first"), 8, "the round lands", must=False)
        if weights:
            assert landed, f"weighted round did not land: {_child(zones['b'])}"
        else:
            assert not landed, "without weights the child lands first and must fail its foreign key"
            assert _child(zones["b"]) == (1, None), "the failed round changed nothing"
    finally:
        cluster.stop()
