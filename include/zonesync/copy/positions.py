"""Where the target's appliers replay from while a copy runs, and moving them there.

Start positions (recorded before the copy reads its first row, seed S002-15 "capture
and retention start before the snapshot"), per source zone s and partition p, as
(applied LSN, Kafka offset):

- s = the copy's source: the last event of the last message below the partition's
  high watermark. Everything below it was published, so committed in the source,
  before the first chunk is read: every chunk holds it (or a newer version of its
  row). Everything above it is replayed.
- s = another zone: what the copy's source has applied of s (its apply_state). Rows
  up to there are in the source's tables, so in the chunks; the rest is replayed.

Installing them in the target (`install`): halt every partition of every source and
list the tables in zonesync.copy_tables (one transaction: the appliers pause them
within a second, and a batch already claimed commits first), then move each
partition and set it running (the applier restarts its pass from apply_state, in
copy mode). A partition moves back to the start position when that is earlier than
where it stands (the target's copy of those rows may be lost: replaying is harmless,
every write is version-guarded), and jumps forward only when it was halted or never
ran: then the events it skips are older than the rows the copy brings (seed S001-12:
a zone rebuilt from a copy starts each source after what the copy carries). The
source's own stream is not moved back: what the target applied of it is below the
high watermark the chunks are read after.

The topics must still hold every message after the start positions (`check_retained`),
or the copy refuses: a replay that starts past the oldest kept message would skip
events, which is the very loss a copy is there to cure.
"""

from __future__ import annotations

from zonesync.copy.request import CopyRefused
from zonesync.events import decode_message
from zonesync.runtime import transport

Positions = dict[str, dict[int, tuple[int, int]]]  # source zone -> partition -> (LSN, Kafka offset)


def _consumer(bootstrap: str):
    from confluent_kafka import Consumer

    return Consumer({**transport.consumer_config(bootstrap, "zonesync-copy-positions"), "error_cb": lambda err: None})


def topic_tails(
    bootstrap: str, zone: str, partitions: int, timeout: float = 10.0, topic_of=transport.topic
) -> dict[int, tuple[int, int]]:
    """Per partition of zone's topic: (LSN, offset) of the last event below the high
    watermark, or (0, -1) for a partition that never held a message."""
    from confluent_kafka import TopicPartition

    topic = topic_of(zone)
    consumer = _consumer(bootstrap)
    out: dict[int, tuple[int, int]] = {}
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high <= 0:
                out[p] = (0, -1)
                continue
            if low >= high:
                raise CopyRefused(
                    f"from: partition {p} of {topic} keeps no message (all {high} expired), so the copy cannot tell "
                    "where its stream stands; retry after the zone's next write to it"
                )
            consumer.assign([TopicPartition(topic, p, high - 1)])
            msg = _poll_one(consumer, timeout)
            if msg is None:
                raise CopyRefused(f"from: offset {high - 1} of {topic} partition {p} could not be read in {timeout} s")
            out[p] = (decode_message(msg.value())[-1].lsn, msg.offset())
    finally:
        consumer.close()
    return out


def _poll_one(consumer, timeout: float):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            return msg
    return None


def applied_positions(conn, source_zone: str) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """A zone's apply_state for one source: {partition: (LSN, offset)} and its halted partitions."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state WHERE source_zone = %s",
            (source_zone,),
        )
        rows = cur.fetchall()
    conn.commit()
    running = {int(p): (int(lsn), int(off)) for p, lsn, off, st in rows if st != "halted"}
    return running, sorted(int(p) for p, _, _, st in rows if st == "halted")


def record_start(
    bootstrap: str, source_conn, source_zone: str, target_zone: str, zones, partitions: int, topic_of=transport.topic
) -> Positions:
    """The start positions of every source of the target (see the module's text); refused
    when the copy's source cannot vouch for a stream it has halted."""
    start: Positions = {source_zone: topic_tails(bootstrap, source_zone, partitions, topic_of=topic_of)}
    for zone in sorted(set(zones) - {source_zone, target_zone}):
        applied, halted = applied_positions(source_conn, zone)
        if halted:
            raise CopyRefused(
                f"from: zone {source_zone} has halted partitions {halted} of source {zone}, so its rows are not "
                f"whole; repair {source_zone} first or copy from another zone"
            )
        start[zone] = {p: applied.get(p, (0, -1)) for p in range(partitions)}
    return start


def check_retained(bootstrap: str, start: Positions, timeout: float = 10.0, topic_of=transport.topic) -> None:
    """Refuse when a topic no longer holds the message after a start position."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(bootstrap)
    try:
        for zone, parts in sorted(start.items()):
            for p, (_, offset) in sorted(parts.items()):
                low, _ = consumer.get_watermark_offsets(TopicPartition(topic_of(zone), p), timeout=timeout)
                if low > offset + 1:
                    raise CopyRefused(
                        f"from: {topic_of(zone)} partition {p} no longer holds offset {offset + 1} (the oldest "
                        f"kept is {low}): the copy could not replay from its start; raise the topic's retention"
                    )
    finally:
        consumer.close()


def moved(source: str, copy_source: str, current: tuple[int, int, str] | None, start: tuple[int, int]):
    """Where one partition of the target goes (pure; see the module's text): the start
    position, or where it stands when it ran and is already at or before it."""
    if current is None or current[2] == "halted":
        return start
    at = (current[0], current[1])
    if source == copy_source:
        return at
    return at if at[0] <= start[0] else start


def snapshot(target_conn) -> dict:
    """The target's apply_state as it stands, {source: {partition: [LSN, offset, status, detail]}}."""
    before: dict[str, dict[int, list]] = {}
    with target_conn.cursor() as cur:
        cur.execute(
            "SELECT source_zone, partition_no, applied_lsn, kafka_offset, status, detail FROM zonesync.apply_state"
        )
        for s, p, lsn, off, status, detail in cur.fetchall():
            before.setdefault(s, {})[int(p)] = [int(lsn), int(off), status, detail]
    target_conn.commit()
    return before


def install(
    target_conn, run_id: str, copy_source: str, start: Positions, tables, before: dict, empty=frozenset()
) -> None:
    """Move the target's appliers to the start positions in copy mode (see above), judged
    from `before`: the apply_state recorded before the first attempt (snapshot), never from
    what a killed attempt left (every partition halted, which would read as "never ran").
    `empty`: the tables the target held no row of (kept from the first attempt)."""
    before = {s: {int(p): v for p, v in parts.items()} for s, parts in before.items()}
    with target_conn.cursor() as cur:
        cur.execute("SELECT source_zone, partition_no FROM zonesync.apply_state FOR UPDATE")
        cur.fetchall()
        for source, parts in start.items():
            for p in parts:
                cur.execute(
                    "INSERT INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset, status, "
                    "detail) VALUES (%s, %s, 0, -1, 'halted', %s) ON DUPLICATE KEY UPDATE status = 'halted', "
                    "detail = VALUES(detail)",
                    (source, p, f"full copy {run_id}: moving to its start position"),
                )
        cur.executemany(
            "INSERT INTO zonesync.copy_tables (table_name, run_id, target_was_empty) VALUES (%s, %s, %s) "
            "ON DUPLICATE KEY UPDATE run_id = VALUES(run_id)",
            [(t, run_id, int(t in empty)) for t in tables],
        )
    target_conn.commit()
    with target_conn.cursor() as cur:
        for source, parts in start.items():
            for p, pos in parts.items():
                was = before.get(source, {}).get(int(p))
                lsn, offset = moved(source, copy_source, tuple(was[:3]) if was else None, tuple(pos))
                cur.execute(
                    "UPDATE zonesync.apply_state SET applied_lsn = %s, kafka_offset = %s, status = 'running', "
                    "detail = '' WHERE source_zone = %s AND partition_no = %s",
                    (lsn, offset, source, p),
                )
    target_conn.commit()


def restore(target_conn, run_id: str, before: dict) -> None:
    """Rollback: the target's apply_state as it was before the copy, and its tables out
    of copy mode (rows the copy merged stay: each is a real version of its row)."""
    with target_conn.cursor() as cur:
        cur.execute("SELECT source_zone, partition_no FROM zonesync.apply_state FOR UPDATE")
        for s, p, *_ in [r for r in cur.fetchall()]:
            was = before.get(s, {}).get(str(p)) or before.get(s, {}).get(int(p))
            if was is None:
                cur.execute("DELETE FROM zonesync.apply_state WHERE source_zone = %s AND partition_no = %s", (s, p))
            else:
                cur.execute(
                    "UPDATE zonesync.apply_state SET applied_lsn = %s, kafka_offset = %s, status = %s, detail = %s "
                    "WHERE source_zone = %s AND partition_no = %s",
                    (was[0], was[1], was[2], was[3], s, p),
                )
        cur.execute("DELETE FROM zonesync.copy_tables WHERE run_id = %s", (run_id,))
    target_conn.commit()
