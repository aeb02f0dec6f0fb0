"""The KV guard: writes to a zone's KV repos judged as the guard judges rows, and logged
for the tagger in the same atomic step (seed 004 §3.2.2, S004-07/08; docs/kv.md).

    kv = KvGuard(guard, kv_endpoint("a"))          # guard: a started dal.Guard of zone a
    kv.set("sessions", "prod:session:42:7f3a", b"...", ttl_s=3600)
    kv.get("sessions", "prod:session:42:7f3a")     # reads are never refused
    kv.delete("sessions", "prod:session:42:7f3a")

A write:
1. fails closed like a row's: refused unless the guard synced within its lease;
2. finds the key's entity by the repo's KV patterns in the tag rules of the version
   the guard runs (a radix tree per repo, built once per tag rules version): a key no
   pattern matches is refused (KeyUntagged: it could never be found by a migration),
   a key two patterns match is refused and alerted (KeyAmbiguous, `kv_ambiguous`:
   never written under one of them at random);
3. judges the entity as a row's: registered -> its unit and stop-write flag; else the
   ZSID rules of a table that takes its ZSID from such ids (WrongZone, stopped,
   BLOCK/RESHARDING refused);
4. runs, while the guard's version cannot change (its shared lock: a new version, a
   stop-write say, is acked only after in-flight writes are done), one script (WRITE,
   below): the key's change and an entry in the repo's change log, the stream
   `zonesync:changes` (op, key, entity, guard version). A script runs whole, alone, and
   reaches the AOF (and any replica) as one MULTI of its effects, so the log never
   misses a write that happened nor holds one that did not: the zone's KV tagger
   (tagging/kv_tagger.py) follows it into the tag store. (A script, not a client-side
   MULTI: 157 against 187 us a write here, docs/kv.md.)

Keys under `zonesync:` are zonesync's own (the log): refused. Expiry (ttl_s) removes a
key without a log entry: its tag outlives it, as a row's tag outlives nothing; a reader
of tags (a migration, `zonesync entity rows`) finds such a key gone and skips it.
"""

from __future__ import annotations

import hashlib
import logging

import pymysql

from zonesync.dal.errors import GuardError, KeyAmbiguous, KeyUntagged

log = logging.getLogger("zonesync.kv_guard")
STREAM = b"zonesync:changes"  # a repo's change log, in the repo's own logical database
RESERVED = "zonesync:"
# KEYS: the key, the log; ARGV: op (set|del), value, ttl seconds ('' none), entity type,
# entity id, guard version. Returns SET's reply or DEL's count.
WRITE = """
local done
if ARGV[1] == 'set' then
  if ARGV[3] ~= '' then done = redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  else done = redis.call('SET', KEYS[1], ARGV[2]) end
else
  done = redis.call('DEL', KEYS[1])
end
redis.call('XADD', KEYS[2], '*', 'op', ARGV[1], 'key', KEYS[1], 'entity_type', ARGV[4], 'entity_id', ARGV[5],
           'version', ARGV[6])
return done
"""
WRITE_SHA = hashlib.sha1(WRITE.encode()).hexdigest().encode()


def _bulk(value) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def command(*parts) -> bytes:
    """One command as the bytes Redis reads (RESP: an array of bulk strings)."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = _bulk(part)
        out += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(out)


class KvGuard:
    def __init__(self, guard, kv):
        """`guard`: a started dal.Guard of the zone; `kv`: its runtime.kv_endpoint.KvEndpoint."""
        if guard.zone != kv.zone:
            raise ValueError(f"the guard runs zone {guard.zone} and the KV store is zone {kv.zone}'s")
        self.guard, self.kv = guard, kv
        self._clients: dict[str, object] = {}
        self.refused = 0

    def client(self, repo: str):
        found = self._clients.get(repo)
        if found is None:
            found = self._clients[repo] = self.kv.connect(repo)
        return found

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()

    # -- reads ------------------------------------------------------------------
    def get(self, repo: str, key: str) -> bytes | None:
        return self.client(repo).get(key)

    # -- writes -----------------------------------------------------------------
    def set(self, repo: str, key: str, value: bytes | str, ttl_s: int | None = None) -> None:
        if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1):
            raise ValueError(f"ttl_s={ttl_s!r}: a whole number of seconds, at least 1 (or None: no expiry)")
        self._write(repo, key, "set", value, "" if ttl_s is None else str(ttl_s))

    def delete(self, repo: str, key: str) -> bool:
        """Whether the key was there."""
        return bool(self._write(repo, key, "del", b"", ""))

    def _write(self, repo: str, key: str, op: str, value, ttl: str):
        if not isinstance(key, str) or not key:
            raise ValueError(f"key {key!r}: a non-empty text")
        client = self.client(repo)  # an unknown repo fails here, before anything is judged
        try:
            with self.guard.lock.shared():
                self.guard.require_synced()
                state = self.guard.state
                if key.startswith(RESERVED):
                    raise KeyUntagged(f"key {key!r}: keys under {RESERVED} are zonesync's own: pick another name")
                decision = state.decide_key(repo, key)
                et, eid = decision.entity
                return self._run(client, command(b"EVALSHA", WRITE_SHA, b"2", key, STREAM, op, value, ttl, et, eid,
                                                 state.version))  # fmt: skip
        except GuardError as exc:
            self.refused += 1
            if isinstance(exc, KeyAmbiguous):
                self._alert(repo, exc)
            raise

    @staticmethod
    def _run(client, packed: bytes):
        """WRITE's reply: sent on a connection of the client's pool (the script loaded first
        when the server lacks it, as after its restart: NOSCRIPT means nothing ran)."""
        from redis.exceptions import NoScriptError

        pool = client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command([packed])
            try:
                return conn.read_response()
            except NoScriptError:
                conn.send_packed_command([command(b"SCRIPT", b"LOAD", WRITE)])
                conn.read_response()
                conn.send_packed_command([packed])
                return conn.read_response()
        except BaseException:
            conn.disconnect()  # a reply may be left unread: never reuse this connection
            raise
        finally:
            pool.release(conn)

    def _alert(self, repo: str, exc: KeyAmbiguous) -> None:
        from zonesync.meta import alerts
        from zonesync.meta.db import MetaError

        try:
            alerts.record(self.guard.meta, self.guard.zone, "kv_ambiguous",
                          {"repo": repo, "key": exc.key, "patterns": exc.patterns, "by": "kv guard"})  # fmt: skip
        except (MetaError, OSError, pymysql.err.Error) as err:  # the refusal stands; the alert is best effort
            log.error("kv guard %s: could not record kv_ambiguous for %r: %s", self.guard.zone, exc.key, err)
