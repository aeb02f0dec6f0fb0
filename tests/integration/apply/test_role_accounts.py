"""Least privilege (issue 24, docs/security.md): the accounts of docker/mariadb/roles.sql,
loaded as the deployment loads them, are enough for each worker to do its work, and
refuse what its role never needs.

Zone a's application writes through its guard as zs_app; a's replicator reads the binlog
as zs_replicator; b's applier writes as zs_applier (with the owners' check on), and so
does b's tagger (its tag store); every one of them reaches meta as zs_meta. The rows
arrive, their tags too, nothing halts, and each account is refused a statement of
another role."""

from __future__ import annotations

import pymysql
import pytest

from tests.support import roles
from tests.support.background import wait_until
from tests.support.replication import Cluster, alerts, checksum, reset_state
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.loop.applier import Applier
from zonesync.apply.loop.settings import ApplierSettings
from zonesync.capture.replicator import Replicator
from zonesync.capture.source import SourceDB
from zonesync.dal import Guard, ZoneDB
from zonesync.meta.store import MetaStore
from zonesync.tagging.rules import parse as parse_tags
from zonesync.tagging.tag_store import TagStore, load_connection
from zonesync.tagging.tagger import Tagger

pytestmark = pytest.mark.integration


@pytest.fixture
def role_accounts(zones):
    roles.install([zones["a"], zones["b"], zones["meta"]])
    return zones


def test_each_worker_runs_under_its_own_account(role_accounts, zones, meta, broker, test_cfg, guard_env):
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=2, check_owners=True)
    meta_role = roles.meta_as(meta)
    a, b = zones["a"], zones["b"]
    replicator = Replicator(
        "a", 1, SourceDB("127.0.0.1", a.port, "zs_replicator", roles.password("zs_replicator"), ["zonesync_app"]),
        meta_role, server_id=5101, partitions=2, bootstrap=cluster.bootstrap, topic_of=cluster.topic,
    )  # fmt: skip
    applier = Applier(
        "b", ["a"],
        lambda: ZoneWriter("127.0.0.1", b.port, "zs_applier", roles.password("zs_applier"), "zonesync_app"),
        meta_role, partitions=2, bootstrap=cluster.bootstrap, topic_of=cluster.topic,
        settings=ApplierSettings(check_owners=True),
    )  # fmt: skip
    cluster.replicators["a"], cluster.appliers["b"] = replicator, applier
    MetaStore(meta).publish_tags(parse_tags({"mysql": [{"repo": "zonesync_app", "table": "tenants",
        "index_keys": ["tenant_id"], "entity": {"type": "tenant", "field": "tenant_id"}}]}), "test: roles")  # fmt: skip
    with b.connect().cursor() as cur:
        cur.execute("DELETE FROM zonesync.tag_segments")
        cur.execute("DELETE FROM zonesync.tag_state")
    tagger = Tagger("b", ["a"], lambda: load_connection("127.0.0.1", b.port, "zs_applier",
                    roles.password("zs_applier"), "zonesync_app"), "zonesync_app", meta_role, 2,
                    bootstrap=cluster.bootstrap, topic_of=cluster.topic)  # fmt: skip
    guard = Guard(meta_role, "a", ZoneDB("127.0.0.1", a.port, "zs_app", roles.password("zs_app"), "zonesync_app"))
    try:
        cluster._run("replicator-a", replicator)
        cluster.wait_started()
        cluster._run("applier-b", applier)
        cluster._run("tagger-b", tagger)
        guard.start()
        with guard.transaction() as tx:
            for tenant in (1, 2, 3):
                tx.insert("tenants", {"tenant_id": tenant, "name": f"t{tenant}"})
        with guard.transaction() as tx:
            tx.update("tenants", {"tenant_id": 2}, {"name": "renamed"})
            tx.delete("tenants", {"tenant_id": 3})
        wait_until(lambda: checksum(b) == checksum(a) and len(checksum(b)) == 2, 30, "b holds a's rows")
        assert {r[1] for r in checksum(b)} == {"t1", "renamed"}
        assert alerts(meta, "b", "partition_halted") == []
        store = TagStore(lambda: b.connect("zonesync_app"), "zonesync_app")
        wait_until(lambda: store.rows_of("tenant", "3") == {} and store.rows_of("tenant", "2"), 30, "b's tags")
        assert tagger.tagged > 0
    finally:
        tagger.stop()
        guard.close()
        cluster.stop()
        reset_state(zones, meta)


# (role, server, statement): each account is refused what belongs to another role
REFUSED = [
    ("zs_app", "a", "UPDATE zonesync.apply_state SET applied_lsn = 0"),  # the applier's bookkeeping
    ("zs_app", "a", "SHOW BINARY LOGS"),  # the replicator's
    ("zs_app", "a", "DELETE FROM zonesync.tombstones"),  # it leaves them, never removes one
    ("zs_app", "a", "SELECT * FROM zonesync.row_locks"),
    ("zs_app", "a", "PURGE BINARY LOGS BEFORE NOW()"),
    ("zs_replicator", "a", "INSERT INTO zonesync_app.tenants (tenant_id, name) VALUES (9, 'x')"),
    ("zs_replicator", "a", "SELECT * FROM zonesync.tombstones"),
    ("zs_applier", "b", "DROP TABLE zonesync_app.tenants"),
    ("zs_applier", "b", "SHOW BINLOG EVENTS"),
    ("zs_applier", "b", "SET SESSION sql_log_bin = 0"),  # nothing it writes leaves the binlog
    ("zs_batch", "b", "CREATE TABLE zonesync_app.extra (id INT PRIMARY KEY)"),
    ("zs_batch", "b", "ALTER TABLE zonesync_app.tenants ADD COLUMN extra INT"),  # DDL is zs_schema's
    ("zs_schema", "b", "INSERT INTO zonesync_app.tenants (tenant_id, name) VALUES (9, 'x')"),  # no rows
    ("zs_schema", "b", "DROP TABLE zonesync_app.tenants"),
    ("zs_schema", "b", "UPDATE zonesync.apply_state SET applied_lsn = 0"),
    ("zs_meta", "meta", "CREATE TABLE zonesync_meta.extra (id INT PRIMARY KEY)"),
    ("zs_meta", "a", "SELECT * FROM zonesync_app.tenants"),  # meta's account sees no zone's rows
    ("zs_admin", "a", "SELECT * FROM zonesync_app.tenants"),  # migrations touch zonesync's schemas only
]


@pytest.mark.parametrize("role, server, statement", REFUSED)
def test_an_account_is_refused_what_its_role_never_needs(role_accounts, zones, role, server, statement):
    conn = roles.connect(zones[server], role)
    try:
        with conn.cursor() as cur, pytest.raises(pymysql.err.OperationalError) as refused:
            cur.execute(statement)
        assert refused.value.args[0] in (1044, 1142, 1227), refused.value  # access denied, in its forms
    finally:
        conn.close()


def test_a_schema_change_runs_as_zs_schema(role_accounts, zones, meta):
    """The schema_change DAG's steps under zs_schema: the scratch copy in the bookkeeping
    schema, the ALTER, the binlog end, and the resume of a hold, with nothing more."""
    from zonesync.apply.batch import table_holds
    from zonesync.capture.binlog import binlog_end
    from zonesync.schema import steps

    for z in ("a", "b"):
        conn = zones[z].connect()
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP TABLE IF EXISTS zonesync_app.probe")
            cur.execute("CREATE TABLE zonesync_app.probe (id INT PRIMARY KEY, v INT)")
            if z == "b":
                cur.execute("DELETE FROM zonesync.table_holds")
        conn.close()
    b = zones["b"].connect()
    table_holds.hold(b, "probe", "held for the test")

    def as_schema(zone):
        conn = roles.connect(zones[zone], "zs_schema", "zonesync_app")
        conn.autocommit(False)
        return conn

    # (one zone: the wait for the others' changes needs replication running, which this test has not;
    # the binlog end it reads is asked below)
    ctx = steps.SchemaChangeContext(
        meta, "role-test", steps.SchemaChangeRequest("ALTER TABLE probe ADD COLUMN w INT NULL", ("b",), "r"),
        as_schema,
    )  # fmt: skip
    try:
        plan = steps.preflight(ctx, lambda zones: 0.0)
        assert "w" in plan["wanted"]["columns"]
        assert steps.apply(ctx, "b", "probe", plan["wanted"]) == "applied"
        steps.verify(ctx, "probe", plan["wanted"])
        conn = as_schema("a")
        assert binlog_end(conn) is not None
        conn.close()
        assert steps.resume(ctx, "probe") == ["b"]
        assert table_holds.holds(b)["probe"][0] == table_holds.DRAINING
    finally:
        with b.cursor() as cur:
            cur.execute("DELETE FROM zonesync.table_holds")
        b.commit()
        b.close()
        for z in ("a", "b"):
            conn = zones[z].connect()
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute("DROP TABLE IF EXISTS zonesync_app.probe")
            conn.close()
