"""A zone's tag store (`zonesync.tags`, `zonesync.tag_state`; include/sql/zone/0004_tags.sql)
and what one batch of change events does to it.

`changes_of` (pure) turns events into tag changes by the tag rules: an insert or update
of a registered table sets the tag of its unique-key values to the entity its entity
field names; a delete, or an update that moves the row to other unique-key values, marks
the old values' tag deleted. Rows without their unique-key values or their entity id (a
NULL entity) are counted as untaggable, never guessed. Forward-rule tables carry no
entity and get no tag: a migration fetches them from their parents.

`TagStore.write` applies a batch and the sources' positions in one transaction, each tag
change only if its version is not older than the tag's: so a replayed or reordered event
never regresses a tag, and the same event read twice yields the same single tag.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import NamedTuple

from zonesync.apply.batch.load_data import NAME as LOAD_NAME
from zonesync.apply.batch.load_data import LoadConnection
from zonesync.events import DELETE, ChangeEvent
from zonesync.tagging.rules import TagRules

_MISSING = object()
MAX_IDX, MAX_ENTITY_ID = 512, 128  # zonesync.tags.idx_data, .entity_id
_COLUMNS = "repo, table_name, idx_data, entity_type, entity_id, version, deleted"


def _guarded(tags: str = "") -> str:
    """The upsert's ON DUPLICATE KEY UPDATE: each change applies only if not older than the
    tag; each assignment sees the ones before it, so version goes last. `tags` qualifies
    the stored row's columns (`zonesync.tags.`) where an unqualified name would be either
    table's (an INSERT ... SELECT from the staging table)."""
    newer = f"VALUES(version) >= {tags}version"
    return ("ON DUPLICATE KEY UPDATE "
            + "".join(f"{c} = IF({newer}, VALUES({c}), {tags}{c}), " for c in ("entity_type", "entity_id", "deleted"))
            + f"version = GREATEST({tags}version, VALUES(version))")  # fmt: skip


def _tsv(text: str) -> str:
    """A value as LOAD DATA's default text format reads it back (backslash escapes)."""
    if "\\" in text or "\t" in text or "\n" in text:
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return text


class TagChange(NamedTuple):
    table: str
    idx_data: str
    entity_type: str
    entity_id: str  # '' for a delete
    version: int
    deleted: bool


def idx_data(values: list) -> str:
    if len(values) == 1 and type(values[0]) is int:  # the common case, without json.dumps: same text
        return f"[{values[0]}]"
    return json.dumps(values, separators=(",", ":"), sort_keys=True, default=str)


def _tag_of(rule, image: dict | None) -> tuple[str, str] | None:
    """(idx_data, entity id) of a row image, None when the image lacks them."""
    if image is None:
        return None
    keys = rule.index_keys
    if len(keys) == 1:
        value = image.get(keys[0], _MISSING)
        if value is _MISSING:
            return None
        values = [value]
    elif any(k not in image for k in keys):
        return None
    else:
        values = [image[k] for k in keys]
    entity = image.get(rule.entity_field)
    if entity is None:
        return None
    idx, entity = idx_data(values), str(entity)
    if len(idx) > MAX_IDX or len(entity) > MAX_ENTITY_ID:  # beyond the store's columns: not cut short
        return None
    return idx, entity


def changes_of(events: Iterable[ChangeEvent], rules: TagRules, repo: str) -> tuple[list[TagChange], int]:
    """(tag changes in event order, events of registered tables that could not be tagged)."""
    out: list[TagChange] = []
    untaggable = 0
    by_table = rules.by_table(repo)
    for e in events:
        rule = by_table.get(e.table)
        if rule is None:
            continue
        old = _tag_of(rule, e.old) if e.old is not None else None
        new = _tag_of(rule, e.new) if e.op != DELETE else None
        if e.op != DELETE and new is None:
            untaggable += 1
        if old is not None and (new is None or new[0] != old[0]):
            out.append(TagChange(e.table, old[0], rule.entity_type, "", e.version, True))
        if new is not None:
            out.append(TagChange(e.table, new[0], rule.entity_type, new[1], e.version, False))
    return out, untaggable


def newest(changes: list[TagChange]) -> list[TagChange]:
    """One change per tag, the newest (what the version-guarded upserts would leave anyway):
    a batch that touches a row ten times writes its tag once."""
    last: dict[tuple[str, str], TagChange] = {}
    for c in changes:
        key = (c.table, c.idx_data)
        seen = last.get(key)
        if seen is None or c.version >= seen.version:
            last[key] = c
    return list(last.values())


class TagStore:
    """One zone's tags, through a connection factory (the tagger's own connection)."""

    def __init__(self, connect, repo: str):
        self.connect = connect
        self.repo = repo

    def positions(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(source, partition) -> (applied LSN, Kafka offset) tagged up to."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT source_zone, partition_no, applied_lsn, kafka_offset FROM zonesync.tag_state")
                return {(s, int(p)): (int(lsn), int(off)) for s, p, lsn, off in cur.fetchall()}
        finally:
            conn.close()

    def caught_up(self, ends: dict[tuple[str, int], int]) -> bool:
        """Whether every partition is tagged up to `ends` (the last offset of each partition
        at some moment: topic_ends()), so every row written before that moment has its tag
        (S004-06: a migration's stock scan waits for this)."""
        positions = self.positions()
        return all(positions.get(key, (0, -1))[1] >= last for key, last in ends.items() if last >= 0)

    def write(self, conn, changes: list[TagChange], positions: dict[tuple[str, int], tuple[int, int]]) -> None:
        """The changes and the new positions, in one transaction on `conn` (committed here).

        On a LoadConnection (apply/batch/load_data.py) the changes go as LOAD DATA LOCAL into
        the session's staging table and one INSERT ... SELECT upserts them: measured 119-136k
        tags/s here against 80-90k as a multi-row INSERT, which any other connection sends."""
        with conn.cursor() as cur:
            if changes and isinstance(conn, LoadConnection):
                self._load(conn, cur, changes)
            elif changes:
                cur.executemany(
                    f"INSERT INTO zonesync.tags ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) {_guarded()}",
                    [(self.repo, c.table, c.idx_data, c.entity_type, c.entity_id, c.version, int(c.deleted))
                     for c in changes],
                )  # fmt: skip
            if positions:
                cur.executemany(
                    "INSERT INTO zonesync.tag_state (source_zone, partition_no, applied_lsn, kafka_offset) "
                    "VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE applied_lsn = VALUES(applied_lsn), "
                    "kafka_offset = VALUES(kafka_offset)",
                    [(s, p, lsn, off) for (s, p), (lsn, off) in positions.items()],
                )
        conn.commit()

    def _load(self, conn, cur, changes: list[TagChange]) -> None:
        cur.execute(
            "CREATE TEMPORARY TABLE IF NOT EXISTS zonesync.tag_stage (repo VARCHAR(64), table_name VARCHAR(64), "
            "idx_data VARCHAR(512), entity_type VARCHAR(32), entity_id VARCHAR(128), version BIGINT, "
            "deleted TINYINT)"  # InnoDB: a MEMORY table's fixed-width rows fill its 16 MiB at ~5k tags
        )
        repo = _tsv(self.repo)
        conn.payload = "".join(
            f"{repo}\t{c.table}\t{_tsv(c.idx_data)}\t{c.entity_type}\t{_tsv(c.entity_id)}\t{c.version}\t{int(c.deleted)}\n"
            for c in changes
        ).encode()
        cur.execute(f"LOAD DATA LOCAL INFILE '{LOAD_NAME}' INTO TABLE zonesync.tag_stage CHARACTER SET utf8mb4")
        # LOCAL implies IGNORE: a value cut short would be a warning, not an error
        if cur.rowcount != len(changes) or conn._result.warning_count:
            raise RuntimeError(f"tag_stage took {cur.rowcount} of {len(changes)} tags with "
                               f"{conn._result.warning_count} warning(s): not written")  # fmt: skip
        cur.execute(
            f"INSERT INTO zonesync.tags ({_COLUMNS}) SELECT {_COLUMNS} FROM zonesync.tag_stage "
            f"{_guarded('zonesync.tags.')}"
        )
        cur.execute("DELETE FROM zonesync.tag_stage")

    def rows_of(self, entity_type: str, entity_id: str, limit: int = 100_000) -> dict[str, list[str]]:
        """table -> unique-key values (idx_data) of every live row tagged with the entity."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT table_name, idx_data FROM zonesync.tags WHERE entity_type = %s AND entity_id = %s "
                    "AND repo = %s AND deleted = 0 ORDER BY table_name, idx_data LIMIT %s",
                    (entity_type, str(entity_id), self.repo, limit),
                )
                out: dict[str, list[str]] = {}
                for table, idx in cur.fetchall():
                    out.setdefault(table, []).append(idx)
                return out
        finally:
            conn.close()


def load_connection(host: str, port: int, user: str, password: str, database: str) -> LoadConnection:
    """A tagger's write connection: LOAD DATA LOCAL from memory, one transaction per batch."""
    return LoadConnection(host=host, port=port, user=user, password=password, database=database,
                          local_infile=True, autocommit=False, charset="utf8mb4")  # fmt: skip
