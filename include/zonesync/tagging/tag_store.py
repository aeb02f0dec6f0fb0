"""A zone's tag store (`zonesync.tag_segments`, `zonesync.tag_state`, `zonesync.tag_writer`;
include/sql/zone/0004_tags.sql): which rows of the zone belong to which entity.

Tags are written at the replication rate and read when an entity migrates (the seed's
"write-heavy, read-rare"), so the store is a log, not an index to update in place: each
batch of the tagger appends, per (entity, repo, table) it touched, one *segment* row
holding that batch's entries (extract.py), lines of `idx <tab> version <tab> deleted`.
An entity's tags are its segments folded in batch order: per `idx` the newest version
wins (on a tie the later batch), and the rows whose newest entry is not a deletion are
the entity's. Writing a batch costs a row per entity it touched, not a row per tag (a
tenant's 50 orders of a batch are one row); measured in docs/benchmarks.md.

Why the fold is right without an index from row to entity: every change that takes a row
out of an entity (a delete, a move to another entity, a new unique key) writes a deleted
entry *into that entity* with the change's version, so an entity's own segments tell
which of its rows left it, however late that change was read; a change read twice, or
a topic read again from its start, appends entries the fold already has.

Compaction: an entity's segments grow with each batch that touches it; compaction folds
its newest segments into one, size-tiered (deleted entries kept: they still guard against
late changes). The tagger compacts the entities it has appended to COMPACT_AT times when
it is not behind (tagger.py: a backlog is tagged at full speed first), and `zonesync tags
compact` folds every entity's segments into one.

Each batch also moves `tag_writer.last_batch` on by one, compare-and-set: batch numbers
order the fold, and a second tagger writing the same zone fails its next batch instead
of interleaving numbers with the first.
"""

from __future__ import annotations

from collections.abc import Iterable

from zonesync.apply.batch.load_data import NAME as LOAD_NAME
from zonesync.apply.batch.load_data import LoadConnection

try:  # the LOAD DATA text rendered in C (zonesync/_tagging.c), when built
    from zonesync import _tagging
except ImportError:  # pragma: no cover - render_segments' Python loop gives the same bytes
    _tagging = None

_SEGMENT_COLUMNS = "entity_type, entity_id, repo, table_name, batch_no, entries"
ROWS_WRITER, KV_WRITER = 1, 2  # tag_writer rows: the row tagger's batch numbers, the KV tagger's
KV_TABLE = ""  # a KV key's segments: repo = the KV repo, table_name '' (include/sql/zone/0005_kv_tags.sql)


def _tsv(text: str) -> str:
    """A value as LOAD DATA's default text format reads it back (backslash escapes)."""
    if "\\" in text or "\t" in text or "\n" in text:
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return text


def entries_text(entries: dict[str, int]) -> str:
    """A segment's entries ({idx: version * 2 + deleted}; an integer idx key is `[key]`) as
    stored: lines `idx <tab> version <tab> deleted` (idx values hold no tab or newline:
    JSON escapes them)."""
    return "\n".join(f"{f'[{idx}]' if type(idx) is int else idx}\t{p >> 1}\t{p & 1}" for idx, p in entries.items())


def render_segments(segments: list, repo: str, batch_no: int, native: bool = True) -> bytes:
    """A batch's segments ((entity type, entity id, table), {idx: version * 2 + deleted})
    as the LOAD DATA text of tag_segments rows."""
    if native and _tagging is not None:
        return _tagging.render_segments(segments, repo, batch_no)
    return "".join(
        f"{_tsv(et)}\t{_tsv(eid)}\t{_tsv(repo)}\t{_tsv(t)}\t{batch_no}\t{_tsv(entries_text(entries))}\n"
        for (et, eid, t), entries in segments
    ).encode()


def fold(segments: Iterable[str], into: dict | None = None) -> dict[str, int]:
    """idx -> version * 2 + deleted: the newest entry per idx of segments given in batch
    order (of equal versions, the later)."""
    out = {} if into is None else into
    for text in segments:
        for line in text.split("\n"):
            if not line:
                continue
            idx, v, d = line.rsplit("\t", 2)
            packed = int(v) << 1 | (d == "1")
            seen = out.get(idx)
            if seen is None or seen >> 1 <= packed >> 1:
                out[idx] = packed
    return out


class TagStore:
    """One zone's tags, through a connection factory."""

    def __init__(self, connect, repo: str):
        self.connect = connect
        self.repo = repo

    # -- reads ----------------------------------------------------------------
    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall())
        finally:
            conn.close()

    def positions(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(source, partition) -> (applied LSN, Kafka offset) tagged up to."""
        rows = self._query("SELECT source_zone, partition_no, applied_lsn, kafka_offset FROM zonesync.tag_state")
        return {(s, int(p)): (int(lsn), int(off)) for s, p, lsn, off in rows}

    def last_batch(self, writer: int = ROWS_WRITER) -> int:
        rows = self._query("SELECT last_batch FROM zonesync.tag_writer WHERE id = %s", (writer,))
        return int(rows[0][0]) if rows else 0

    def stream_position(self) -> str | None:
        """The stream id of the last KV change log entry tagged (a KV repo's store)."""
        rows = self._query("SELECT stream_id FROM zonesync.tag_kv_state WHERE repo = %s", (self.repo,))
        return rows[0][0] if rows else None

    def caught_up(self, ends: dict[tuple[str, int], int]) -> bool:
        """Whether every partition is tagged up to `ends` (the last offset of each partition
        at some moment: tagger.topic_ends()), so every row written before that moment has
        its tag (S004-06: a migration's stock scan waits for this)."""
        positions = self.positions()
        return all(positions.get(key, (0, -1))[1] >= last for key, last in ends.items() if last >= 0)

    def rows_of(self, entity_type: str, entity_id: str, limit: int = 100_000) -> dict[str, list[str]]:
        """table -> unique-key values (idx) of every row the entity holds now, sorted."""
        folds: dict[str, dict] = {}
        for table, entries in self._query(
            "SELECT table_name, entries FROM zonesync.tag_segments WHERE entity_type = %s AND entity_id = %s "
            "AND repo = %s ORDER BY table_name, batch_no",
            (entity_type, str(entity_id), self.repo),
        ):
            fold([entries], folds.setdefault(table, {}))
        out, left = {}, limit
        for table in sorted(folds):
            live = sorted(idx for idx, packed in folds[table].items() if not packed & 1)[:left]
            if live:
                out[table], left = live, left - len(live)
        return out

    def entries_of(self, entity_type: str, entity_id: str, table: str) -> dict[str, int]:
        """idx -> version * 2 + deleted: the entity's folded entries of one table, deleted
        ones too (what a migration's KV catch-up compares versions with)."""
        rows = self._query("SELECT entries FROM zonesync.tag_segments WHERE entity_type = %s AND entity_id = %s "
                           "AND repo = %s AND table_name = %s ORDER BY batch_no",
                           (entity_type, str(entity_id), self.repo, table))  # fmt: skip
        return fold(text for (text,) in rows)

    def dump(self) -> list[tuple[str, str, str, str, int, int]]:
        """Every entity's folded tags: (table, idx, entity type, entity id, version,
        deleted), sorted; what two stores must agree on to hold the same tags."""
        folds: dict[tuple[str, str, str], dict] = {}
        for et, eid, table, entries in self._query(
            "SELECT entity_type, entity_id, table_name, entries FROM zonesync.tag_segments WHERE repo = %s "
            "ORDER BY entity_type, entity_id, table_name, batch_no",
            (self.repo,),
        ):
            fold([entries], folds.setdefault((et, eid, table), {}))
        return sorted((t, idx, et, eid, p >> 1, p & 1) for (et, eid, t), f in folds.items() for idx, p in f.items())

    def segment_count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM zonesync.tag_segments WHERE repo = %s", (self.repo,))[0][0])

    # -- writes (on the caller's connection, one transaction) ------------------
    def rules_version(self) -> int:
        """The tag rules version the zone's tagger last wrote a batch by."""
        rows = self._query("SELECT rules_version FROM zonesync.tag_writer WHERE id = 1")
        return int(rows[0][0]) if rows else 0

    def write(self, conn, segments: list, positions: dict, batch_no: int, compact: Iterable[tuple] = (),
              rules_version: int | None = None, writer: int = ROWS_WRITER,
              stream_id: str | None = None) -> None:  # fmt: skip
        """A batch's segments (extract.TagBatch.segments(): ((entity type, entity id, table),
        {idx: version * 2 + deleted})) as batch `batch_no`, the sources' new positions (or,
        for a KV repo's batch, `stream_id`: its change log's) and the (entity type, id,
        table) to compact, in one transaction on `conn` (committed here), with the tag
        rules version the batch was made by. Fails, writing nothing, unless `batch_no`
        follows the last batch of `writer`."""
        with conn.cursor() as cur:
            if rules_version is None:
                cur.execute("UPDATE zonesync.tag_writer SET last_batch = %s WHERE id = %s AND last_batch = %s",
                            (batch_no, writer, batch_no - 1))  # fmt: skip
            else:
                cur.execute("UPDATE zonesync.tag_writer SET last_batch = %s, rules_version = %s "
                            "WHERE id = %s AND last_batch = %s",
                            (batch_no, rules_version, writer, batch_no - 1))  # fmt: skip
            if cur.rowcount != 1:
                conn.rollback()
                raise RuntimeError(f"tag batch {batch_no}: the store's last batch is not {batch_no - 1} "
                                   "(another tagger writes this zone's tag store?)")  # fmt: skip
            if segments:
                self._append(conn, cur, segments, batch_no)
            if positions:
                cur.executemany(
                    "INSERT INTO zonesync.tag_state (source_zone, partition_no, applied_lsn, kafka_offset) "
                    "VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE applied_lsn = VALUES(applied_lsn), "
                    "kafka_offset = VALUES(kafka_offset)",
                    [(s, p, lsn, off) for (s, p), (lsn, off) in positions.items()],
                )
            if stream_id is not None:
                cur.execute("INSERT INTO zonesync.tag_kv_state (repo, stream_id) VALUES (%s, %s) "
                            "ON DUPLICATE KEY UPDATE stream_id = VALUES(stream_id)",
                            (self.repo, stream_id))  # fmt: skip
            for key in compact:
                self._compact(cur, key)
        conn.commit()

    def _append(self, conn, cur, segments: list, batch_no: int) -> None:
        """Segment rows: LOAD DATA LOCAL from memory on a LoadConnection (one statement for
        the batch), a multi-row INSERT on any other."""
        if not isinstance(conn, LoadConnection):
            cur.executemany(f"INSERT INTO zonesync.tag_segments ({_SEGMENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)",
                            [(et, eid, self.repo, t, batch_no, entries_text(entries))
                             for (et, eid, t), entries in segments])  # fmt: skip
            return
        conn.payload = render_segments(segments, self.repo, batch_no)
        cur.execute(f"LOAD DATA LOCAL INFILE '{LOAD_NAME}' INTO TABLE zonesync.tag_segments "
                    f"CHARACTER SET utf8mb4 ({_SEGMENT_COLUMNS})")  # fmt: skip
        # LOCAL implies IGNORE: a duplicate or a value cut short would be a warning, not an error
        if cur.rowcount != len(segments) or conn._result.warning_count:
            raise RuntimeError(f"tag_segments took {cur.rowcount} of {len(segments)} segments with "
                               f"{conn._result.warning_count} warning(s): not written")  # fmt: skip

    def _compact(self, cur, key: tuple[str, str, str], full: bool = False) -> bool:
        """The newest segments of (entity type, entity id, table) folded into one, numbered
        as the newest of them (a segment written later still folds after it): size-tiered,
        an older segment joins while it is no bigger than twice those chosen, so an
        entity's entries are rewritten a few times over its life, not at each compaction
        (`full`: all of them). Whether anything was merged."""
        et, eid, table = key
        where = "entity_type = %s AND entity_id = %s AND repo = %s AND table_name = %s"
        params = (et, eid, self.repo, table)
        cur.execute(f"SELECT batch_no, LENGTH(entries) FROM zonesync.tag_segments WHERE {where} "
                    f"ORDER BY batch_no DESC FOR UPDATE", params)  # fmt: skip
        sizes = [(int(b), int(n)) for b, n in cur.fetchall()]
        chosen, total = 0, 0
        for _, size in sizes:
            if chosen and not full and size > 2 * total:
                break
            chosen, total = chosen + 1, total + size
        if chosen < 2:
            return False
        first, last = sizes[chosen - 1][0], sizes[0][0]
        # a locking read, as the DELETE's: a plain SELECT would read the transaction's read
        # view, older than a segment another writer (a backfill) committed before the lock
        # above, and the DELETE would drop that segment unread
        cur.execute(f"SELECT entries FROM zonesync.tag_segments WHERE {where} AND batch_no >= %s ORDER BY batch_no "
                    "FOR UPDATE", (*params, first))  # fmt: skip
        folded = fold(text for (text,) in cur.fetchall())
        cur.execute(f"DELETE FROM zonesync.tag_segments WHERE {where} AND batch_no >= %s AND batch_no < %s",
                    (*params, first, last))  # fmt: skip
        cur.execute(f"UPDATE zonesync.tag_segments SET entries = %s WHERE {where} AND batch_no = %s",
                    (entries_text(folded), *params, last))  # fmt: skip
        return True

    def compact_all(self, conn, per_round: int = 500) -> int:
        """Every entity's segments folded into one each (`zonesync tags compact`), a round
        of entities per transaction: the number of (entity, table) groups compacted."""
        done, after = 0, ("", "", "")
        while True:
            with conn.cursor() as cur:
                cur.execute("SELECT entity_type, entity_id, table_name FROM zonesync.tag_segments WHERE repo = %s "
                            "AND (entity_type, entity_id, table_name) > (%s, %s, %s) "
                            "GROUP BY entity_type, entity_id, table_name HAVING COUNT(*) > 1 "
                            "ORDER BY entity_type, entity_id, table_name LIMIT %s",
                            (self.repo, *after, per_round))  # fmt: skip
                keys = [tuple(r) for r in cur.fetchall()]
                if not keys:
                    return done
                done += sum(self._compact(cur, key, full=True) for key in keys)
                after = keys[-1]
            conn.commit()


def load_connection(host: str, port: int, user: str, password: str, database: str) -> LoadConnection:
    """A tagger's write connection: LOAD DATA LOCAL from memory, one transaction per batch."""
    return LoadConnection(host=host, port=port, user=user, password=password, database=database,
                          local_infile=True, autocommit=False, charset="utf8mb4")  # fmt: skip
