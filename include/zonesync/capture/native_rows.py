"""Rows events read and queued by the C module (zonesync/_native.c), where it applies.

At bulk rates the replicator's Python per row (reading the row image, building a
ChangeEvent, encoding it) was its whole CPU, and the replicator one of the three
processes sharing this machine's two cores during a catch-up. For a table whose
columns are all integers or UTF-8 text, and whose primary key is one integer
column, the C module goes from the rows event's bytes to each event's JSON
document in one pass (see _native.c). Everything else, and every table when the
module is not built, takes the Python path (rows.py, publish.py), which writes the
same bytes: tests/unit/test_native_rows.py holds the two to that.

At read time the stream only checks the event (walk_rows) and keeps its bytes; the
images are decoded in Python only if something asks for them (NativeRows).
"""

from __future__ import annotations

import codecs

import msgspec
from pymysqlreplication.constants import FIELD_TYPE

from zonesync import events
from zonesync.capture.row_images import decode_rows
from zonesync.events import DELETE, INSERT, MAX_MESSAGE_EVENTS, UPDATE, EventError, make_lsn

try:
    from zonesync import _native
except ImportError:  # not built (scripts/build_native.py): the Python path does it all
    _native = None

_OPS = {INSERT: 0, UPDATE: 1, DELETE: 2}
_INTEGERS = {
    (FIELD_TYPE.TINY, False): 1,
    (FIELD_TYPE.TINY, True): 2,
    (FIELD_TYPE.SHORT, False): 3,
    (FIELD_TYPE.SHORT, True): 4,
    (FIELD_TYPE.INT24, False): 5,
    (FIELD_TYPE.INT24, True): 6,
    (FIELD_TYPE.LONG, False): 7,
    (FIELD_TYPE.LONG, True): 8,
    (FIELD_TYPE.LONGLONG, False): 9,
    (FIELD_TYPE.LONGLONG, True): 10,
}
_U64 = 10
_TEXT = 20  # + the length prefix's size
_ENCODE = msgspec.json.Encoder().encode


class NativeSpec:
    """A table map as the C module reads it: a code per column, each column's JSON key."""

    __slots__ = ("codes", "names", "index")

    def __init__(self, codes: bytes, names: tuple[bytes, ...], index: dict[str, int]):
        self.codes, self.names, self.index = codes, names, index


def native_spec(columns, encoding_of) -> NativeSpec | None:
    """The spec of a table map, or None when a column is not an integer or UTF-8 text
    (`encoding_of(column)` is the codec the Python reader decodes its text with)."""
    if _native is None:
        return None
    codes = bytearray()
    for col in columns:
        if not col.name:
            return None
        code = _INTEGERS.get((col.type, bool(col.unsigned)))
        if code is None:
            if col.type in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
                prefix = 2 if col.max_length > 255 else 1
            elif col.type == FIELD_TYPE.BLOB:
                prefix = col.length_size
            else:
                return None
            encoding = encoding_of(col)
            if encoding is None or codecs.lookup(encoding).name != "utf-8" or not 1 <= prefix <= 4:
                return None
            code = _TEXT + prefix
        codes.append(code)
    names = tuple(_ENCODE(col.name) + b":" for col in columns)
    return NativeSpec(bytes(codes), names, {col.name: i for i, col in enumerate(columns)})


class NativeRows:
    """A rows event's images, kept as its bytes (walk_rows checked them). Its length is
    the row count; iterating decodes the images with the Python reader, for anyone
    who asks (the library's `rows` format, tests): publishing never does."""

    __slots__ = ("spec", "read", "data", "pos", "end", "op", "count", "_decoded")

    def __init__(self, spec: NativeSpec, read, data: bytes, pos: int, end: int, op: str, count: int):
        self.spec, self.read, self.data, self.pos, self.end, self.op = spec, read, data, pos, end, op
        self.count, self._decoded = count, None

    @classmethod
    def check(cls, spec: NativeSpec, read, data: bytes, pos: int, end: int, op: str) -> NativeRows | None:
        count = _native.walk_rows(spec.codes, spec.names, data, pos, end, _OPS[op])
        return None if count < 0 else cls(spec, read, data, pos, end, op, count)

    def __len__(self) -> int:
        return self.count

    def _images(self) -> list:
        if self._decoded is None:
            self._decoded = decode_rows(self.read, self.op, self.data, self.pos, self.end)
        return self._decoded

    def __iter__(self):
        return iter(self._images())

    def __getitem__(self, i):
        return self._images()[i]

    def __eq__(self, other) -> bool:  # as the list of images it stands for
        if isinstance(other, NativeRows | list):
            return self._images() == list(other)
        return NotImplemented

    __hash__ = None


def queue_native(
    rows: NativeRows, table, pk_cols, op, end_pos, file_bits, source, txn_id, index, count, commit_ts, chain, full
) -> int | None:
    """publish.queue_txn_events's loop for one rows event, in C; the new index, or None
    when this event's key is not one integer column (the Python loop takes it).
    `chain` is (partition_lsns, hwm, retry_partitions, pending, partition_counts) and comes
    back updated."""
    spec = rows.spec
    key = spec.index.get(pk_cols[0]) if len(pk_cols) == 1 else None
    if key is None or spec.codes[key] >= _TEXT:
        return None
    origin, version = spec.index.get("_zs_origin", -1), spec.index.get("_zs_version", -1)
    for column in (origin, version):
        if column >= 0 and (spec.codes[column] == _U64 or spec.codes[column] >= _TEXT):
            return None  # past a signed BIGINT, or text: Python's int() of it
    zone, zone_id, partitions = source
    partition_lsns, hwm, retry_partitions, pending, partition_counts = chain

    try:
        index, hwm = _native.queue_rows(
            spec.codes,
            spec.names,
            rows.data,
            rows.pos,
            rows.end,
            _OPS[op],
            key,
            origin,
            version,
            zone_id,
            make_lsn(0, end_pos, 0) | file_bits,
            events.table_seed(table),
            partitions,
            b',"source_zone":' + _ENCODE(zone) + b',"origin_zone":',
            b',"table":' + _ENCODE(table) + b',"pk":{' + _ENCODE(pk_cols[0]) + b":",
            b'},"op":' + _ENCODE(op) + b',"old":',
            b',"txn_id":' + _ENCODE(txn_id) + b',"row_index":',
            index,
            count,
            commit_ts,
            partition_lsns,
            partition_counts,
            hwm,
            retry_partitions,
            pending,
            full,
            msgspec.Raw,
            MAX_MESSAGE_EVENTS,
        )
    except OverflowError:
        raise EventError(f"row index of a rows event ending at {end_pos} does not fit an LSN") from None
    chain[1] = hwm
    return index
