"""The KV tagger of a zone: each KV repo's change log -> the zone's tag store (seed 004
§3.2.2, S004-07/08; docs/kv.md).

KV repos are the zone's own (not replicated): the KV guard (dal/kv.py) writes each key's
change and an entry in the repo's stream `zonesync:changes` in one atomic script, and
this loop tags those entries, with its state beside the tags it describes:

1. Open: per repo, the stream id `zonesync.tag_kv_state` holds (the stream's start when
   none). Resume is this step again.
2. Take up to `batch` entries of a repo (XREAD after that id; when no repo had any, wait
   up to `wait_s` on the first repo's stream for one) and make its segments (pure:
   `kv_segments`): each key matched against the repo's patterns in the tag rules in
   force, its entity's segment getting `json(key) -> version * 2 + deleted`, version
   from the entry's id (<ms> << 20 | <seq>: the log's order, which is the writes'). A key
   that matches no pattern (`kv_untaggable`) or two (`kv_ambiguous`, S004-08) is alerted
   and not tagged, never tagged by one pattern at random.
3. Append the segments, the repo's new stream id and the batch number (the KV writer's
   row of tag_writer) in one zone transaction. A crash before the commit loses nothing
   (the entries are read again); after it, nothing is read twice; the same entries read
   again (the state lost) append entries the fold already has.
4. Trim the stream below the committed id (XTRIM MINID ~: whole nodes of up to 100
   entries, Redis's cheap form): the log holds what is not yet tagged, plus less than
   a node.
5. Once a second: the tag rules read again from meta.

Any error (Redis, the zone or meta down) ends the pass; the next starts from step 1.
"""

from __future__ import annotations

import json
import logging
import time

from zonesync.dal.kv import STREAM
from zonesync.meta.db import MetaConfig
from zonesync.tagging.follow import RulesFollower
from zonesync.tagging.radix import AmbiguousKey
from zonesync.tagging.tag_store import KV_TABLE, KV_WRITER, TagStore

log = logging.getLogger("zonesync.kv_tagger")
COMPACT_AT = 16


def entry_version(entry_id: bytes | str) -> int:
    """A log entry's id `<ms>-<seq>` as one increasing integer."""
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms) << 20 | int(seq or 0)


def kv_segments(entries: list, tree) -> tuple[list, list[tuple[str, str, str, str]]]:
    """((entity type, entity id, KV_TABLE), {json(key): version * 2 + deleted}) of a repo's
    log entries [(id, {field: value})], matched by `tree` (radix.PatternTree, or None: the
    repo has no patterns); and the entries not tagged: (alert kind, entry id, key, why)."""
    segments: dict[tuple, dict] = {}
    refused: list[tuple[str, str, str, str]] = []
    for entry_id, fields in entries:
        eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        try:
            key = fields[b"key"].decode()
            deleted = fields[b"op"] == b"del"
        except (KeyError, UnicodeDecodeError) as exc:
            refused.append(("kv_untaggable", eid, repr(fields.get(b"key")), f"malformed entry: {exc!r}"))
            continue
        try:
            found = tree.identify(key) if tree is not None else None
        except AmbiguousKey as exc:
            refused.append(("kv_ambiguous", eid, key, str(exc)))
            continue
        if found is None:
            refused.append(("kv_untaggable", eid, key, "matches no pattern of the repo"))
            continue
        pattern, entity_id = found
        seg = segments.setdefault((pattern.entity_type, entity_id, KV_TABLE), {})
        seg[json.dumps(key)] = entry_version(eid) << 1 | deleted
    return list(segments.items()), refused


class KvTagger:
    def __init__(self, zone: str, kv, connect, meta: MetaConfig, batch: int = 10_000, wait_s: float = 0.05):
        """`kv`: the zone's runtime.kv_endpoint.KvEndpoint; `connect`: a zone connection."""
        self.zone, self.kv, self.connect, self.meta = zone, kv, connect, meta
        self.batch, self.wait_s = batch, wait_s
        self.rules_version = 0
        self.trees: dict = {}  # KV repo -> PatternTree of the tag rules at rules_version
        self.follower = RulesFollower(meta, zone, f"kv tagger {zone}", log)
        self.stopping = False
        self.read = 0  # log entries taken (committed)
        self.tagged = 0  # tag entries written (a key's entries of one batch are one)
        self.refused = 0
        self.appended: dict[tuple, int] = {}

    def stop(self) -> None:
        self.stopping = True

    def run(self, max_seconds: float | None = None) -> None:
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while not self.stopping and (deadline is None or time.monotonic() < deadline):
            try:
                self._pass(deadline)
            except Exception as exc:  # noqa: BLE001 - any failure: a fresh pass from tag_kv_state
                log.warning("kv tagger %s: pass ended (%s): starting again from tag_kv_state", self.zone, exc)
                time.sleep(0.5)

    def _pass(self, deadline: float | None) -> None:
        self._read_rules(force=True)  # step 1
        repos = [name for name, _ in self.kv.repos]
        clients = {r: self.kv.connect(r) for r in repos}
        stores = {r: TagStore(self.connect, r) for r in repos}
        after = {r: stores[r].stream_position() or "0-0" for r in repos}
        conn = self.connect()
        conn.autocommit(False)
        batch_no = stores[repos[0]].last_batch(KV_WRITER) if repos else 0
        try:
            while not self.stopping and (deadline is None or time.monotonic() < deadline):
                took = 0
                for repo in repos:  # step 2
                    got = clients[repo].xread({STREAM: after[repo]}, count=self.batch)
                    entries = got[0][1] if got else []
                    if entries:
                        batch_no = self._tag(conn, stores[repo], clients[repo], entries, batch_no + 1)
                        after[repo] = entries[-1][0].decode()
                        took += len(entries)
                if not took and repos:  # idle: wait on the first repo's log (the others at the next round)
                    clients[repos[0]].xread({STREAM: after[repos[0]]}, count=1, block=int(self.wait_s * 1000))
                self._read_rules()  # step 5
        finally:
            conn.close()
            for c in clients.values():
                c.close()

    def _tag(self, conn, store: TagStore, client, entries: list, batch_no: int) -> int:
        """Steps 2-4 for one repo's entries: the batch number written."""
        segments, refused = kv_segments(entries, self.trees.get(store.repo))
        for kind, entry_id, key, why in refused:
            self._alert(kind, {"repo": store.repo, "entry": entry_id, "key": key, "detail": why})
        last = entries[-1][0].decode()
        compact = self._to_compact(segments, store.repo)
        store.write(conn, segments, {}, batch_no, compact, self.rules_version, writer=KV_WRITER, stream_id=last)
        client.xtrim(STREAM, minid=last)  # step 4
        self.read += len(entries)
        self.tagged += sum(len(e) for _, e in segments)
        self.refused += len(refused)
        return batch_no

    def _to_compact(self, segments: list, repo: str) -> list[tuple]:
        due = []
        for key, _ in segments:
            n = self.appended[(repo, key)] = self.appended.get((repo, key), 0) + 1
            if n >= COMPACT_AT:
                self.appended[(repo, key)] = 0
                due.append(key)
        if len(self.appended) > 1_000_000:
            self.appended.clear()
        return due

    def _read_rules(self, force: bool = False) -> None:
        found = self.follower.newer(force)
        if found is not None:
            self.rules_version, rules = found
            self.trees = rules.trees()

    def _alert(self, kind: str, detail: dict) -> None:
        self.follower.alert(kind, detail)


def caught_up(kv, connect) -> bool:
    """Whether every repo's log is tagged up to its newest entry now (what "tagged up to
    now" means for a migration's wait, S004-06)."""
    for repo, _ in kv.repos:
        client = kv.connect(repo)
        try:
            newest = client.xrevrange(STREAM, count=1)
        finally:
            client.close()
        done = TagStore(connect, repo).stream_position()
        if newest and (done is None or entry_version(done) < entry_version(newest[0][0])):
            return False
    return True
