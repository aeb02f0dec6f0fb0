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
