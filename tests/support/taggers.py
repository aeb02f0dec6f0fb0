"""Zone b's taggers of a test, each a thread of the test's replication Cluster."""

from __future__ import annotations

from tests.support.background import wait_until
from tests.support.replication import ZONES
from zonesync.tagging.tag_store import load_connection
from zonesync.tagging.tagger import Tagger, topic_ends


class Taggers:
    """Zone b's taggers of a test, each a thread of the cluster."""

    def __init__(self, cluster, inst, meta):
        self.cluster, self.inst, self.meta, self.running = cluster, inst, meta, []

    def start(self, compact_at: int = 2) -> Tagger:
        inst = self.inst
        t = Tagger("b", list(ZONES), lambda: load_connection("127.0.0.1", inst.port, "root", "", "zonesync_app"),
                   "zonesync_app",
                   self.meta, self.cluster.partitions, bootstrap=self.cluster.bootstrap,
                   topic_of=self.cluster.topic, compact_at=compact_at)  # fmt: skip
        self.cluster._run(f"tagger-b-{len(self.running)}", t)
        self.running.append(t)
        return t

    def stop(self) -> None:
        for t in self.running:
            t.stop()
        wait_until(lambda: not any(th.is_alive() for n, th in self.cluster.threads.items() if n.startswith("tagger")),
                   20, "the taggers stopped")  # fmt: skip

    def caught_up(self, store) -> bool:
        return store.caught_up(topic_ends(self.cluster.bootstrap(), self.cluster.topic, list(ZONES),
                                          self.cluster.partitions))  # fmt: skip


def live_tags(store, table: str) -> dict[str, str]:
    """idx -> entity id of the table's live tags in a TagStore (an idx live in two entities fails)."""
    live = [(r[1], r[3]) for r in store.dump() if r[0] == table and not r[5]]
    assert len({idx for idx, _ in live}) == len(live), "a row tagged live in two entities"
    return dict(live)


def older_orders(inst, meta, rules_doc: dict, rows: int, tenants: int, reason: str) -> None:
    """Orders 1..rows (tenant = id mod tenants) written straight into a zone, older than the
    tag rules `rules_doc` published now; the zone's store emptied and its tag_writer on the
    new version, as the zone's tagger (which the caller does not run) would have it."""
    from zonesync.meta.store import MetaStore
    from zonesync.tagging.rules import parse

    version = MetaStore(meta).publish_tags(parse(rules_doc), reason)
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DELETE FROM orders")
        for lo in range(1, rows + 1, 5000):
            cur.executemany("INSERT INTO orders (order_id, tenant_id, amount, _zs_version) VALUES (%s, %s, 1, 9)",
                            [(i, i % tenants) for i in range(lo, min(lo + 5000, rows + 1))])  # fmt: skip
        cur.execute("DELETE FROM zonesync.tag_segments")
        cur.execute("DELETE FROM zonesync.tag_backfill")
        cur.execute("UPDATE zonesync.tag_writer SET rules_version = %s WHERE id = 1", (version,))


def clear_orders(inst) -> None:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DELETE FROM orders")
        cur.execute("DELETE FROM zonesync.tag_segments")
