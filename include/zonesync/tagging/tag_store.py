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
from dataclasses import dataclass

from zonesync.events import DELETE, ChangeEvent
from zonesync.tagging.rules import TagRules


@dataclass(frozen=True)
class TagChange:
    table: str
    idx_data: str
    entity_type: str
    entity_id: str  # '' for a delete
    version: int
    deleted: bool


def idx_data(values: list) -> str:
    return json.dumps(values, separators=(",", ":"), sort_keys=True, default=str)


def _tag_of(rule, image: dict | None) -> tuple[str, str] | None:
    """(idx_data, entity id) of a row image, None when the image lacks them."""
    if image is None or any(k not in image for k in rule.index_keys):
        return None
    entity = image.get(rule.entity_field)
    if entity is None:
        return None
    return idx_data([image[k] for k in rule.index_keys]), str(entity)


def changes_of(events: Iterable[ChangeEvent], rules: TagRules, repo: str) -> tuple[list[TagChange], int]:
    """(tag changes in event order, events of registered tables that could not be tagged)."""
    out: list[TagChange] = []
    untaggable = 0
    for e in events:
        rule = rules.mysql_rule(repo, e.table)
        if rule is None or rule.forward_table:
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
        """The changes and the new positions, in one transaction on `conn` (committed here)."""
        with conn.cursor() as cur:
            if changes:
                cur.executemany(
                    "INSERT INTO zonesync.tags (repo, table_name, idx_data, entity_type, entity_id, version, deleted) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
                    # each assignment sees the ones before it: version goes last
                    "entity_type = IF(VALUES(version) >= version, VALUES(entity_type), entity_type), "
                    "entity_id = IF(VALUES(version) >= version, VALUES(entity_id), entity_id), "
                    "deleted = IF(VALUES(version) >= version, VALUES(deleted), deleted), "
                    "version = GREATEST(version, VALUES(version))",
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
