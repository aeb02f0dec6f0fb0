"""A migration's KV keys (docs/migration.md, "KV keys"): the locating entities' keys of
every KV repo move from the source zone's KV store to the target's, as resident rows do
(KV repos are each zone's own: not replicated).

    bulk      (admit: plan1 while the LEs are written, plan2 inside the window) the repo's
              change log position S at the source is recorded once (the target's state
              hash), then every key of the LEs is copied: DUMP + PTTL at the source (one
              MULTI per batch), RESTORE ... REPLACE with the remaining TTL at the target;
              a key gone meanwhile, or one the target holds that the source does not
              (left by a crashed rollback), is deleted at the target.
    compare_before_stop  (verify, plan1: the LEs still written) the source's log
              position C recorded, the keys changed after S copied again, then every key
              of the LEs compared at source and target: presence, value (DUMP bytes) and
              whether it expires (not the TTL itself: it runs down while the move takes).
              A key that differs and changed at the source after C is in flight (the
              window brings it); any other difference fails verify, before anything is
              stopped. C is kept only when none did.
    in_window  (final_check, inside the stop-write window: after the stop's acks no guard
              writes an LE's key anywhere) only the keys changed after C (S when no look
              before the stop passed): copied again, or deleted at the target, then the
              same comparison of those keys only (all of them when no look before the stop
              passed: plan2), so the window costs the keys written since verify, not the
              LEs' whole key set; a difference fails the step, the run rolls back. (A key
              changed at the target behind the run's back after verify is not seen there,
              as a row changed so would be by the rows' final checksums: the target's keys
              of an LE are written by nobody else before the flip, the guard refusing
              them.)
    remove    rollback (before the flip): the keys the run wrote at the target;
              release (after the lift, unless keep_source_copy): the source's copies.

Which keys are the LEs': the union of the zone's tag store (the KV tagger's entries, with
their versions and deletes) and the repo's change log `zonesync:changes` (each guard
write's entry names its entity), read in that order: the tagger trims only entries it has
tagged and committed, so an entry missing from the log read first is in the tags read
after. No wait for the tagger, and a tagger that is behind or stopped misses nothing.

Every write here is a maintenance write, not a guard's: one script per key does the
RESTORE or DEL and its change-log entry (`by`: the run), so the zone's KV tagger tags the
target's new keys to their entity (a later migration finds them) and the deleted ones as
deleted (`entity rows --keys` lists none of them at the source afterwards). Every step is
idempotent (RESTORE REPLACE, DEL; a log entry read twice folds to the same tag): a step
killed anywhere converges when run again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from zonesync import config
from zonesync.dal.kv import STREAM
from zonesync.migrate.request import MigrationRefused
from zonesync.runtime.kv_endpoint import KvEndpoint, kv_endpoint
from zonesync.tagging.kv_tagger import entry_version
from zonesync.tagging.tag_store import KV_TABLE, TagStore

BATCH = 500  # keys per pipeline
PAGE = 10_000  # change log entries per read
STATE_TTL_S = 7 * 86400  # the run's state hash at the target, kept this long after the run
# KEYS: the key, the log; ARGV: op (set|del), DUMP payload, TTL ms (0: none), entity type,
# entity id, the run. The change and its log entry in one step, as the KV guard's WRITE.
MOVE = """
local done = 1
if ARGV[1] == 'set' then redis.call('RESTORE', KEYS[1], ARGV[3], ARGV[2], 'REPLACE')
else done = redis.call('DEL', KEYS[1]) end
redis.call('XADD', KEYS[2], '*', 'op', ARGV[1], 'key', KEYS[1], 'entity_type', ARGV[4], 'entity_id', ARGV[5],
           'version', '0', 'by', ARGV[6])
return done
"""


class KvMoveError(RuntimeError):
    """A KV store that does not answer (the step fails; retried, or rolled back)."""


def repos_of(tag_rules, le_types: set[str]) -> list[str]:
    """The KV repos holding keys of these entity types (a pattern of theirs), sorted."""
    if tag_rules is None:
        return []
    return sorted(r for r, patterns in tag_rules.kv_repos.items() if any(p.entity_type in le_types for p in patterns))


@dataclass
class Side:
    """One zone's part: its KV store and its tag store."""

    zone: str
    kv: KvEndpoint
    zone_conn: object  # zone name -> a new DB-API connection

    def connect(self):
        return self.zone_conn(self.zone)


class KvMove:
    def __init__(self, run_id: str, les: list[tuple[str, str]], repos: list[str], source: Side, target: Side):
        self.run_id, self.les, self.repos = run_id, {tuple(le) for le in les}, repos
        self.source, self.target = source, target
        self.state_key = f"zonesync:migration:{run_id}"

    # -- the steps -------------------------------------------------------------
    def bulk(self) -> dict[str, int]:
        """Every key of the LEs copied (S recorded first, once): {repo: keys copied}."""
        out = {}
        for repo in self.repos:
            src, dst = self._client(self.source, repo), self._client(self.target, repo)
            try:
                dst.hsetnx(self.state_key, "start", _last_id(src))
                dst.expire(self.state_key, STATE_TTL_S)
                # the target's known keys too: one a crashed rollback left, gone at the source, is deleted
                keys = {**self._known(self.target, dst, repo), **self._known(self.source, src, repo)}
                out[repo] = self._copy(src, dst, keys)
                dst.hset(self.state_key, "bulk", out[repo])
            finally:
                src.close(), dst.close()
        return out

    def compare_before_stop(self, limit: int = 10) -> list[str]:
        """(verify) `repo key: why` of each LE key that differs and is not in flight; C
        recorded per repo when none (see the module's text)."""
        out: list[str] = []
        for repo in self.repos:
            src, dst = self._client(self.source, repo), self._client(self.target, repo)
            try:
                mark = _last_id(src)  # C: before the catch-up reads the log
                known, since = self._known(self.source, src, repo), entry_version(self._start(dst, repo))
                self._copy(src, dst, {key: seen for key, seen in known.items() if seen[0] > since})  # changed after S
                keys = set(known) | set(self._known(self.target, dst, repo))
                differ = self._compared(src, dst, keys)
                if differ:  # a key written at the source since C: the window's catch-up brings it
                    moving = self._known(self.source, src, repo, after=mark)
                    differ = [(key, why) for key, why in differ if key not in moving]
                out += [f"{repo} {key}: {why}" for key, why in differ]
                if not differ:
                    dst.hset(self.state_key, mapping={"compared": mark, "compared_keys": len(keys)})
            finally:
                src.close(), dst.close()
        return _first(out, limit)

    def in_window(self, limit: int = 10) -> list[str]:
        """(final_check, writes stopped) the keys changed at the source since C (else S)
        copied again or deleted at the target, then compared: those keys, or every key of
        the LEs when no C was recorded. `repo key: why` of each that differs."""
        out: list[str] = []
        for repo in self.repos:
            src, dst = self._client(self.source, repo), self._client(self.target, repo)
            try:
                compared = dst.hget(self.state_key, "compared")
                changed = self._known(
                    self.source, src, repo, after=compared.decode() if compared is not None else self._start(dst, repo)
                )
                self._copy(src, dst, changed)
                if compared is None:
                    keys = set(self._known(self.source, src, repo)) | set(self._known(self.target, dst, repo))
                else:  # no guard writes an LE's key now: the keys just caught up are those that changed
                    keys = set(changed)
                dst.hset(self.state_key, mapping={"caught_up": len(changed), "window_compared": len(keys)})
                out += [f"{repo} {key}: {why}" for key, why in self._compared(src, dst, keys)]
            finally:
                src.close(), dst.close()
        return _first(out, limit)

    def count(self) -> int:
        """How many keys of the LEs the source holds (what a copy would move), every repo."""
        total = 0
        for repo in self.repos:
            client = self._client(self.source, repo)
            try:
                total += sum(not deleted for _, deleted, _ in self._known(self.source, client, repo).values())
            finally:
                client.close()
        return total

    def remove(self, side: str) -> dict[str, int]:
        """The LEs' keys deleted in `side` ('source' | 'target'), each with its log entry
        (deleted in the zone's tags); {repo: keys that were there}."""
        where = self.source if side == "source" else self.target
        out = {}
        for repo in self.repos:
            client = self._client(where, repo)
            try:
                live = {k: le for k, (_, deleted, le) in self._known(where, client, repo).items() if not deleted}
                out[repo] = self._delete(client, live)
                if side == "target":
                    client.delete(self.state_key)
            finally:
                client.close()
        return out

    def moved(self) -> dict[str, tuple[int, int]]:
        """{repo: (keys copied by the bulk, keys caught up in the window)} as recorded."""
        out = {}
        for repo in self.repos:
            client = self._client(self.target, repo)
            try:
                state = client.hgetall(self.state_key)
            finally:
                client.close()
            out[repo] = (int(state.get(b"bulk", 0)), int(state.get(b"caught_up", 0)))
        return out

    # -- the parts ---------------------------------------------------------------
    def _client(self, side: Side, repo: str):
        return side.kv.connect(repo)

    def _start(self, dst, repo: str) -> str:
        """S, as the bulk copy recorded it at the target."""
        start = dst.hget(self.state_key, "start")
        if start is None:
            raise KvMoveError(f"repo {repo}: no bulk copy recorded at zone {self.target.zone} for "
                              f"{self.run_id}: run admit first")  # fmt: skip
        return start.decode()

    def _compared(self, src, dst, keys: set[str]) -> list[tuple[str, str]]:
        """(key, why) of each of `keys` whose value, presence or expiry differs."""
        out = []
        for batch in _batches(sorted(keys)):
            for key, a, b in zip(batch, _dumps(src, batch), _dumps(dst, batch), strict=True):
                why = _differs(a, b, self.source.zone, self.target.zone)
                if why:
                    out.append((key, why))
        return out

    def _known(self, side: Side, client, repo: str, after: str = "0-0") -> dict[str, tuple[int, bool, tuple]]:
        """key -> (version, deleted, its LE) of the LEs' keys changed after `after` in
        this zone: the change log first, then the tag store (see the module's text)."""
        out: dict[str, tuple[int, bool, tuple]] = {}

        def saw(key: str, version: int, deleted: bool, le: tuple) -> None:
            if key not in out or out[key][0] <= version:
                out[key] = (version, deleted, le)

        for entry_id, fields in _entries(client, after):
            le = (fields.get(b"entity_type", b"").decode(), fields.get(b"entity_id", b"").decode())
            if le in self.les and b"key" in fields:
                saw(fields[b"key"].decode(), entry_version(entry_id), fields.get(b"op") == b"del", le)
        floor = entry_version(after)
        store = TagStore(side.connect, repo)
        for le in sorted(self.les):
            for idx, packed in store.entries_of(le[0], le[1], KV_TABLE).items():
                if packed >> 1 > floor:
                    saw(json.loads(idx), packed >> 1, bool(packed & 1), le)
        return out

    def _copy(self, src, dst, keys: dict[str, tuple]) -> int:
        """Each key's value at the source landed at the target (deleted there when gone);
        how many were copied."""
        script, copied = dst.register_script(MOVE), 0
        names = sorted(keys)
        for batch in _batches(names):
            pipe = dst.pipeline(transaction=False)
            for key, (payload, ttl) in zip(batch, _dumps(src, batch), strict=True):
                le = keys[key][2]
                if payload is None or ttl == -2 or ttl == 0:  # gone (or expiring this very ms)
                    script(keys=[key, STREAM], args=["del", b"", 0, le[0], le[1], self.run_id], client=pipe)
                else:
                    script(keys=[key, STREAM], args=["set", payload, max(ttl, 0), le[0], le[1], self.run_id],
                           client=pipe)  # fmt: skip
                    copied += 1
            pipe.execute()
        return copied

    def _delete(self, client, keys: dict[str, tuple]) -> int:
        script, there = client.register_script(MOVE), 0
        names = sorted(keys)
        for batch in _batches(names):
            pipe = client.pipeline(transaction=False)
            for key in batch:
                le = keys[key]
                script(keys=[key, STREAM], args=["del", b"", 0, le[0], le[1], self.run_id], client=pipe)
            there += sum(int(n) for n in pipe.execute())
        return there


def _first(lines: list[str], limit: int) -> list[str]:
    return lines[:limit] + ([f"... {len(lines) - limit} more"] if len(lines) > limit else [])


def _batches(items: list) -> list[list]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]


def _last_id(client) -> str:
    """The newest id the repo's change log ever gave (an empty log: its last one; none: 0-0)."""
    try:
        return client.xinfo_stream(STREAM)["last-generated-id"].decode()
    except Exception as exc:  # noqa: BLE001 - redis-py raises ResponseError for a missing stream
        if "no such key" in str(exc).lower():
            return "0-0"
        raise


def _entries(client, after: str):
    """The change log's entries after `after`, in pages."""
    low = "-" if after == "0-0" else f"({after}"
    while True:
        page = client.xrange(STREAM, min=low, max="+", count=PAGE)
        yield from page
        if len(page) < PAGE:
            return
        low = f"({page[-1][0].decode()}"


def _dumps(client, keys: list[str]) -> list[tuple[bytes | None, int]]:
    """(DUMP payload or None, PTTL) of each key, read in one MULTI (a consistent pair)."""
    pipe = client.pipeline(transaction=True)
    for key in keys:
        pipe.dump(key)
        pipe.pttl(key)
    got = pipe.execute()
    return [(got[i], int(got[i + 1])) for i in range(0, len(got), 2)]


def _differs(a: tuple, b: tuple, za: str, zb: str) -> str | None:
    (va, ta), (vb, tb) = a, b
    if va is None and vb is None:
        return None
    if va is None or vb is None:
        return f"only in zone {zb if va is None else za}"
    if va != vb:
        return "value differs"
    if (ta == -1) != (tb == -1):
        return f"expires in zone {za if ta != -1 else zb} only"
    return None


def mover(meta, run, zone_conn) -> KvMove | None:
    """The run's KV move (None: no KV repo holds keys of its LEs' types); MigrationRefused
    naming the setting when a zone's KV store is not configured; KvMoveError when one does
    not answer. Nothing is changed here."""
    from zonesync.meta.store import MetaStore

    found = MetaStore(meta).tags_at()
    repos = repos_of(found[1] if found else None, {t for t, _ in run.les})
    if not repos:
        return None
    sides = []
    for zone in (run.source_zone, run.target_zone):
        try:
            kv = kv_endpoint(zone)
            for repo in repos:
                kv.db(repo)
        except config.ConfigError as exc:
            raise MigrationRefused(f"kv: {exc}") from None
        sides.append(Side(zone, kv, zone_conn))
    move = KvMove(run.run_id, run.les, repos, *sides)
    for side in sides:
        client = side.kv.connect(repos[0])
        try:
            client.ping()
        except Exception as exc:  # noqa: BLE001 - redis-py's ConnectionError, TimeoutError, AuthenticationError
            raise KvMoveError(f"zone {side.zone}'s KV store at {side.kv.host}:{side.kv.port} does not answer "
                              f"({exc}): start it, or fix ZONESYNC_KV_{side.zone.upper()}_URL") from None  # fmt: skip
        finally:
            client.close()
    return move


def summary(moved: dict[str, tuple[int, int]]) -> str:
    """The outcome's words: `KV keys moved: sessions 12 (3 caught up in the window), ...`."""
    if not moved:
        return ""
    return "; KV keys moved: " + ", ".join(f"{repo} {bulk} ({caught} caught up in the window)"
                                           for repo, (bulk, caught) in moved.items())  # fmt: skip
