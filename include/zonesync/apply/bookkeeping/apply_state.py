"""zonesync.apply_state: where each (source zone, partition) stands in the target.

The position is written in the same transaction as the rows it covers (record),
so a crash leaves either the batch and its position or neither, and a restart
re-applies from the recorded position (the version checks make any overlap a
no-op).

The claim. Each transaction first locks its partitions' apply_state rows FOR
UPDATE and checks that each still stands where the batch's chain starts (the
first event's prev_lsn). An applier that paused (SIGSTOP, a long GC, a hung
host) while another took over its partitions would otherwise commit a stale
batch and move the position back: its check fails (StalePosition), its
transaction rolls back, and its pass restarts from what apply_state says now
(seed case S003-36). The rows exist from the pass's start (ensure), so the lock
always has a row to hold; manual locks (tools/lock_commands.py) take the same row locks, so
no batch is half-way while one is added or resolved.

Operators' instructions (seed S003-33: ROLLBACK, RESTART) go through the same
row: `zonesync halt` sets the status under the row lock, so it waits for a batch
that claimed the partition before it, and every batch that claims it afterwards
finds it halted (PartitionHalted: nothing written). Halt and resume of one
partition are serialized by that lock, and each is idempotent.
"""

from __future__ import annotations

from zonesync.apply.errors import PartitionHalted, StalePosition


def claim(cur, lit, positions) -> dict[tuple[str, int], int]:
    """Lock the batch's apply_state rows; StalePosition unless each stands where its
    chain starts (a missing row counts as LSN 0), PartitionHalted if one was halted.
    Returns their Kafka offsets."""
    if not positions:
        return {}
    by_source: dict[str, list[int]] = {}
    for s, p, *_ in positions:
        by_source.setdefault(s, []).append(int(p))
    # By primary key only (FORCE INDEX, no row-constructor IN): a scan would lock every
    # partition's row, and appliers sharing a zone (--group) would wait on each other's,
    # or on a hung one's until the lock wait timeout.
    where = " OR ".join(
        f"(source_zone = {lit(s)} AND partition_no IN ({', '.join(map(str, sorted(ps)))}))"
        for s, ps in sorted(by_source.items())
    )
    cur.execute(
        "SELECT source_zone, partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state "
        f"FORCE INDEX (PRIMARY) WHERE {where} FOR UPDATE"
    )
    rows = cur.fetchall()
    halted = sorted((s, int(p)) for s, p, _, _, status in rows if status == "halted")
    if halted:
        raise PartitionHalted(f"partitions {halted} were halted since this batch was read: it is not applied")
    at = {(s, int(p)): int(lsn) for s, p, lsn, _, _ in rows}
    for s, p, _, _, start, *_ in positions:
        if at.get((s, int(p)), 0) != start:
            raise StalePosition(
                f"apply_state of {s} partition {p} is at LSN {at.get((s, int(p)), 0)}, this batch starts after "
                f"{start}: another applier moved it; the batch is not applied"
            )
    return {(s, int(p)): int(offset) for s, p, _, offset, _ in rows}


def chain_events(positions) -> dict[tuple[str, int], int]:
    """(source zone, partition) -> how many events its chain in this batch holds: the sixth
    member of a position, when it has one (applier._positions)."""
    return {(p[0], int(p[1])): int(p[5]) for p in positions if len(p) > 5}


def record(lit, positions, events: dict[tuple[str, int], int]) -> str:
    """The statement that records (source zone, partition, applied LSN, Kafka offset), and
    adds the events of each partition's chain this batch commits (`events`: every one the
    chain accepted, whatever was decided for it; seed S002-10), sent with the batch's
    writes and ahead of its COMMIT."""
    return (
        "INSERT INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset, events) VALUES "
        + ", ".join(
            f"({lit(s)}, {int(p)}, {int(lsn)}, {int(off)}, {int(events.get((s, int(p)), 0))})"
            for s, p, lsn, off in positions
        )
        + " ON DUPLICATE KEY UPDATE applied_lsn = VALUES(applied_lsn), kafka_offset = VALUES(kafka_offset), "
        "events = events + VALUES(events)"
    )


def ensure(conn, keys: list[tuple[str, int]]) -> None:
    """An apply_state row for every (source zone, partition), at LSN 0 where there was
    none: the claim locks a row that is always there."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT IGNORE INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset) "
            "VALUES (%s, %s, 0, -1)",
            keys,
        )
    conn.commit()


def read(conn) -> dict[tuple[str, int], tuple[int, int, str]]:
    """(source zone, partition) -> (applied LSN, Kafka offset, status)."""
    with conn.cursor() as cur:
        cur.execute("SELECT source_zone, partition_no, applied_lsn, kafka_offset, status FROM zonesync.apply_state")
        rows = cur.fetchall()
    conn.commit()
    return {(s, int(p)): (int(lsn), int(off), st) for s, p, lsn, off, st in rows}


def halt(conn, source_zone: str, partition: int, detail: str) -> int:
    """Mark the partition halted, with why: the status lives beside the position, so a
    restarted applier leaves the partition halted too. Returns the applied LSN it halted at:
    read under the row lock the halt took, after every batch that claimed the partition
    before it committed, and before any later one could (their claims find it halted)."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO zonesync.apply_state (source_zone, partition_no, applied_lsn, kafka_offset, status, "
            "detail) VALUES (%s, %s, 0, -1, 'halted', %s) ON DUPLICATE KEY UPDATE status = 'halted', "
            "detail = VALUES(detail)",
            (source_zone, partition, detail[:500]),
        )
        cur.execute(
            "SELECT applied_lsn FROM zonesync.apply_state WHERE source_zone = %s AND partition_no = %s",
            (source_zone, partition),
        )
        (applied,) = cur.fetchone()
    conn.commit()
    return int(applied)
