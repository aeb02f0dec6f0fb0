"""Step 4 of the replicator (replicator.py): a committed transaction's rows as ChangeEvents.

Each row gets its deterministic LSN, the prev_lsn of its partition (the partition's
last LSN, kept by the caller across transactions and passes), and is queued for its
partition; the replicator produces the queues as messages.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import msgspec

from zonesync import events
from zonesync.capture.native_rows import NativeRows, queue_native
from zonesync.events import (
    DELETE,
    MAX_MESSAGE_EVENTS,
    MAX_ROWS_PER_EVENT,
    POS_BITS,
    ROW_BITS,
    ChangeEvent,
    encode_row,
    file_number,
    make_lsn,
    pk_text,
)

_END_OPEN = b"false}"  # how an event document ends before close_txn: ..."txn_end":false}


@dataclass
class Txn:
    txn_id: str
    skip: bool
    # per rows event: (table, its primary key columns, op, [(before, after)] per row,
    # end position, whether the images are plain JSON values)
    events: list[tuple[str, list[str], str, list, int, bool]] = field(default_factory=list)
    rows: int = 0
    # A large transaction (replicator.py, step 2) is read twice: first only counted
    # (`counting`, its events dropped as they are read), then streamed with its row count
    # and commit time known (`total`, `commit_ts`), each rows event queued as it is read.
    counting: bool = False
    total: int | None = None
    commit_ts: int = 0


def queue_txn_events(
    txn: Txn,
    log_file,
    commit_ts,
    source,
    partition_lsns,
    hwm,
    retry_partitions,
    pending,
    full,
    first_index=0,
    partition_counts=None,
    lsn_file_offset=0,
) -> int:
    """Step 4: one committed transaction's rows as ChangeEvents, queued per partition;
    a queue that reaches MAX_MESSAGE_EVENTS goes to `full(partition, events)` at once.
    `source` is (zone, zone id, partition count); returns the new high-water mark.
    `txn.rows` is the transaction's row count; a large transaction streamed a rows event
    at a time passes its total there and the index of the event's first row.
    `partition_counts` counts every event given a place in a partition's chain, resent
    ones included (they are re-counted from the checkpoint the resend rewound to).
    `lsn_file_offset` is the segment's (segments.py): an LSN's file number is the binlog
    file's plus it, so a promoted replica's LSNs go on above its former primary's.

    Per row: the primary key, its text and partition, the LSN, the event. What is the
    same for a whole rows event (its table's key columns and partition hash prefix,
    the LSN's file and position bits, whether its images need tagging) is worked out
    once per rows event: this loop runs for every row captured.
    """
    counts = partition_counts if partition_counts is not None else {}  # events published per partition
    fno = file_number(log_file) + lsn_file_offset
    make_lsn(fno, 0, 0)  # (the file number fits an LSN)
    file_bits = fno << (POS_BITS + ROW_BITS)
    count = txn.rows
    (zone, zone_id, partitions), txn_id = source, txn.txn_id
    crc32 = zlib.crc32
    index = first_index
    for table, pk_cols, op, images, end_pos, plain in txn.events:
        if type(images) is NativeRows:  # read by the C module: queued by it (native_rows.py)
            chain = [partition_lsns, hwm, retry_partitions, pending, counts]
            done = queue_native(
                images, table, pk_cols, op, end_pos, file_bits, source, txn_id, index, count, commit_ts, chain, full
            )
            if done is not None:
                index, hwm = done, chain[1]
                continue
        seed = events.table_seed(table)  # events.partition_of, the table's part hashed once
        base = make_lsn(0, end_pos, 0) | file_bits
        single = pk_cols[0] if len(pk_cols) == 1 else None
        bump = 1 if op == DELETE else 0  # a delete's version is the deleted row's + 1: its
        # tombstone outranks every earlier image of the row
        for i, (old, new) in enumerate(images):
            image = new if new is not None else old
            if single is not None and type(image[single]) is int:
                value = image[single]
                enc_pk = {single: value}
                text = f"[{value}]"  # pk_text's form of a one-integer key
            else:
                enc_pk = encode_row({c: image[c] for c in pk_cols})
                text = pk_text(enc_pk)
            partition = crc32(text.encode(), seed) % partitions
            if i > MAX_ROWS_PER_EVENT:
                make_lsn(0, end_pos, i)  # raises: the row index does not fit an LSN
            lsn = base | i
            is_retry = lsn <= hwm
            prev_lsn = partition_lsns.get(partition, 0)
            partition_lsns[partition] = lsn
            counts[partition] = counts.get(partition, 0) + 1
            if is_retry and retry_partitions is not None and partition not in retry_partitions:
                index += 1
                continue
            event = ChangeEvent(  # (its fields in order; one per row captured, so no call more)
                lsn, prev_lsn, zone, int(image.get("_zs_origin") or zone_id), table, enc_pk, op,
                old if plain else encode_row(old), new if plain else encode_row(new),
                int(image.get("_zs_version") or 0) + bump, txn_id, index, count, commit_ts, partition, is_retry,
            )  # fmt: skip
            index += 1
            queue = pending.get(partition)
            if queue is None:
                pending[partition] = [event]
            else:
                queue.append(event)
                if len(queue) >= MAX_MESSAGE_EVENTS:
                    del pending[partition]
                    full(partition, queue)
            if lsn > hwm:
                hwm = lsn
    return hwm


def close_txn(pending: dict) -> None:
    """A transaction is queued whole: the last event of each partition's queue is the
    last row of its transaction there, and gets txn_end (seed S002-02). A queue whose last
    event belongs to an earlier transaction was marked then; marking it again changes
    nothing. The C module's events are JSON already (msgspec.Raw): their document's end
    is rewritten, byte for byte what the Python encoder writes for txn_end = True."""
    for queue in pending.values():
        last = queue[-1]
        if type(last) is ChangeEvent:
            last.txn_end = True
        else:
            data = bytes(last)
            if data.endswith(_END_OPEN):
                queue[-1] = msgspec.Raw(data[:-6] + b"true}")
