"""ChangeEvent: one row change, as it travels from a zone's binlog to the others.

LSN (seed 000: "ChangeEventLSN 是由根据固定信息生成的"): derived from the binlog
position alone, so re-reading the same binlog always yields the same LSN, LSNs
order events within a source zone, and an LSN decodes back to where it came
from:

    lsn = file_number << 47 | end_position_of_the_rows_event << 15 | row_index

(16 bits of file number, 32 of position, 15 of row index: 63 bits, a signed
BIGINT). `prev_lsn` is the LSN of the previous event published to the same
partition (0 for the first), so an applier can prove that nothing between two
events went missing.

Values are JSON with tags for what JSON lacks: {"$d": "12.50"} decimals,
{"$t": "2026-01-01T00:00:00"} datetimes, {"$b": base64} bytes, {"$td": seconds}
time columns. Decoding gives values MySQL accepts back as they were.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import zlib
from typing import Literal

import msgspec

from zonesync.sql_names import is_ident

FILE_BITS, POS_BITS, ROW_BITS = 16, 32, 15
MAX_ROWS_PER_EVENT = (1 << ROW_BITS) - 1

INSERT, UPDATE, DELETE = "insert", "update", "delete"


class EventError(ValueError):
    """A malformed event: named field, never silently applied."""


def make_lsn(file_number: int, position: int, row_index: int) -> int:
    if not 0 <= file_number < (1 << FILE_BITS):
        raise EventError(f"binlog file number {file_number} does not fit an LSN")
    if not 0 <= position < (1 << POS_BITS):
        raise EventError(f"binlog position {position} does not fit an LSN")
    if not 0 <= row_index <= MAX_ROWS_PER_EVENT:
        raise EventError(f"row index {row_index} does not fit an LSN")
    return (file_number << (POS_BITS + ROW_BITS)) | (position << ROW_BITS) | row_index


def split_lsn(lsn: int) -> tuple[int, int, int]:
    """(binlog file number, end position of the rows event, row index)."""
    return lsn >> (POS_BITS + ROW_BITS), (lsn >> ROW_BITS) & ((1 << POS_BITS) - 1), lsn & MAX_ROWS_PER_EVENT


def file_number(log_file: str) -> int:
    try:
        return int(log_file.rsplit(".", 1)[1])
    except (IndexError, ValueError):
        raise EventError(f"binlog file name {log_file!r} has no numeric suffix") from None


def _encode(value):
    if isinstance(value, decimal.Decimal):
        return {"$d": str(value)}
    if isinstance(value, dt.datetime | dt.date):
        return {"$t": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$td": value.total_seconds()}
    if isinstance(value, bytes | bytearray):
        return {"$b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, set):
        return sorted(value)
    return value


_PLAIN = (int, str, float, bool, type(None))


def encode_row(row: dict | None) -> dict | None:
    if row is None:
        return None
    # fast path: most rows hold only JSON-native values (a third of capture's CPU otherwise)
    for v in row.values():
        if type(v) not in _PLAIN:
            return {k: _encode(v) for k, v in row.items()}
    return row


def _decode(value):
    if isinstance(value, dict) and len(value) == 1:
        ((tag, raw),) = value.items()
        if tag == "$d":
            return decimal.Decimal(raw)
        if tag == "$t":
            return dt.datetime.fromisoformat(raw) if "T" in raw else dt.date.fromisoformat(raw)
        if tag == "$td":
            return dt.timedelta(seconds=raw)
        if tag == "$b":
            return base64.b64decode(raw)
    return value


def decode_row(row: dict | None) -> dict | None:
    if row is None:
        return None
    for v in row.values():
        if type(v) is dict:  # only tagged values need decoding
            return {k: _decode(v) for k, v in row.items()}
    return row


# msgspec writes the same compact JSON as json.dumps(separators=(",", ":")) (UTF-8
# instead of \u escapes) in a tenth of the time: at bulk rates JSON was a fifth of
# capture's CPU and a third of the applier's.
_ENCODER = msgspec.json.Encoder()


# A msgspec Struct, not a dataclass: msgspec decodes a document into a Struct in half the
# time (the applier decodes every event it receives), and builds it faster. gc=False: an
# event holds plain values and row dicts, never a reference back to itself.
class ChangeEvent(msgspec.Struct, gc=False):
    lsn: int
    prev_lsn: int
    source_zone: str
    origin_zone: int
    table: str
    pk: dict
    op: Literal["insert", "update", "delete"]  # checked in C by the fast decoders
    old: dict | None  # encoded row image before (update, delete)
    new: dict | None  # encoded row image after (insert, update)
    version: int
    txn_id: str
    row_index: int
    row_count: int
    commit_ts: int
    partition: int
    is_retry: bool = False
    # the last row of its transaction in its partition (seed S002-02): an applier applies
    # a partition's rows of one transaction together, never some of them before the rest
    txn_end: bool = False

    def to_json(self) -> bytes:
        return _ENCODER.encode(self)  # its fields in order, as the replicator writes them

    @classmethod
    def from_json(cls, raw: bytes) -> ChangeEvent:
        """Decode and validate an event document; EventError names what is wrong.

        The fast path decodes straight into the Struct, its field types checked in C
        (stricter than the rules below: an int where a string is due fails it). Whatever
        it refuses, and any op/row combination the rules forbid, goes through the checks
        below, which accept or name the fault exactly as they always did.
        """
        if type(raw) is not bytes:  # a null message (Kafka tombstone) has no value
            raise EventError(f"event is not a JSON document (a message value of {type(raw).__name__})")
        events = _fast(_FAST_DECODE, raw)
        return events[0] if events is not None else cls._checked(raw)

    @classmethod
    def _checked(cls, raw: bytes) -> ChangeEvent:
        return cls._from_doc(_parse(raw))

    @classmethod
    def _from_doc(cls, doc) -> ChangeEvent:
        if not isinstance(doc, dict):
            raise EventError("event is not a JSON object")
        keys = doc.keys()
        if not _REQUIRED <= keys:
            raise EventError(f"event lacks field(s) {', '.join(f for f in _FIELDS if f in _REQUIRED - keys)}")
        op = doc["op"]
        if type(op) is not str or op not in _OPS:
            raise EventError(f"op {op!r} is not insert, update or delete")
        for f, kind in _TYPES.items():  # every field: a wrong type would fail only later, in SQL
            if f in doc and type(doc[f]) is not kind:  # (a JSON true is a bool, never an int here)
                raise EventError(f"{f} must be {_KIND_NAMES[kind]}, got {_shown(doc[f])}")
        for f in ("old", "new"):
            if doc[f] is not None and type(doc[f]) is not dict:
                raise EventError(f"{f} must be an object or null, got {_shown(doc[f])}")
        if op != DELETE and type(doc["new"]) is not dict:
            raise EventError(f"{op} event without a new row")
        if op != INSERT and type(doc["old"]) is not dict:
            raise EventError(f"{op} event without an old row")
        event = cls(**{k: doc[k] for k in _FIELDS if k in doc})  # unknown extra fields: only ours
        _check_names(event)
        return event

    def key(self) -> tuple[str, str]:
        return self.table, pk_text(self.pk)


_FIELDS = ChangeEvent.__struct_fields__
_REQUIRED = frozenset(_FIELDS) - {"is_retry", "txn_end"}
_OPS = frozenset((INSERT, UPDATE, DELETE))
_DECODE = json.JSONDecoder().decode
_FAST_DECODE = msgspec.json.Decoder(ChangeEvent).decode
_FAST_BATCH = msgspec.json.Decoder(list[ChangeEvent]).decode
_TYPES = {"lsn": int, "prev_lsn": int, "source_zone": str, "origin_zone": int, "table": str, "pk": dict,
          "version": int, "txn_id": str, "row_index": int, "row_count": int, "commit_ts": int, "partition": int,
          "is_retry": bool, "txn_end": bool}  # fmt: skip
_KIND_NAMES = {int: "an integer", str: "a string", dict: "an object", bool: "true or false"}
# Table names seen valid (a set lookup per event instead of a pattern match); a stream of
# ever new names stops being remembered past this many, and is checked one by one.
_NAMED: set[str] = set()
_NAMED_MAX = 10_000


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_names(event: ChangeEvent) -> None:
    """What reaches SQL as a name: the table, a plain name; the primary key, a non-empty
    object. An event of another shape is no retry's to fix: EventError (its partition
    halts, alerted with the offset), not a failure in the writer."""
    table = event.table
    if table not in _NAMED:
        if not is_ident(table):
            raise EventError(f"table {_shown(table)} is not a plain table name")
        if len(_NAMED) < _NAMED_MAX:
            _NAMED.add(table)
    if not event.pk:
        raise EventError("pk is empty: an event names its row by its primary key")


def _fast(decoder, raw: bytes) -> list[ChangeEvent] | None:
    """The typed decoder's events (a lone document's as a list of one), or None for
    anything it refuses or that breaks the op/row rules: those go through the checks.

    msgspec skips unknown fields without validating their UTF-8, and the checks refuse
    such a document, so it must not pass here either. op is one of the three and new
    and old are objects or null (the decoder checked that); what is left is which of
    them an op needs.
    """
    if not raw.isascii():
        try:
            raw.decode()
        except UnicodeDecodeError:
            return None
    try:
        decoded = decoder(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None
    events = decoded if type(decoded) is list else [decoded]
    if any((e.new is None and e.op != DELETE) or (e.old is None and e.op != INSERT) for e in events):
        return None
    try:
        for e in events:
            _check_names(e)
    except EventError:
        return None  # the checks name it
    return events


def _parse(raw: bytes):
    try:
        return _DECODE(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventError(f"not JSON: {exc}") from None
    except RecursionError:
        raise EventError("not JSON: nested too deeply") from None


# -- the Kafka message: a partition's events in order, one JSON array ---------------------
# A message carries every event the replicator read for one partition in one burst (up
# to MAX_MESSAGE_EVENTS): at bulk rates per-message costs (produce, delivery report,
# broker, fetch, the consume loop) were a third of the pipeline's CPU with one event
# per message. Events keep their own LSN and prev_lsn, so the applier's continuity
# check is per event whatever the grouping: a resend may group them differently.
MAX_MESSAGE_EVENTS = 500
# Kafka's default message.max.bytes is 1 MB: a message of wide rows is split below it
# (one event alone may still be larger, as before batching).
MAX_MESSAGE_BYTES = 900_000


def encode_message(events: list[ChangeEvent]) -> bytes:
    return _ENCODER.encode(events)


def encode_messages(events: list[ChangeEvent]) -> list[bytes]:
    """The events as one message, or, past MAX_MESSAGE_BYTES (wide rows), as several in order."""
    payload = _ENCODER.encode(events)
    if len(payload) <= MAX_MESSAGE_BYTES or len(events) == 1:
        return [payload]
    half = len(events) // 2
    return encode_messages(events[:half]) + encode_messages(events[half:])


def decode_message(raw: bytes) -> list[ChangeEvent]:
    """The events of one message, in order; EventError names the event and what is wrong.

    A JSON array of event documents; a lone document (one event per message, as
    replicators wrote before messages carried batches) is read as a batch of one.
    """
    if type(raw) is not bytes:
        return [ChangeEvent.from_json(raw)]  # names the missing value
    if raw[:1] != b"[":
        return [ChangeEvent.from_json(raw)]
    events = _fast(_FAST_BATCH, raw)
    if events:
        return events
    # anything the typed decoder refused: the Python checks, event by event, which
    # accept or name the fault as they do for a lone event
    docs = _parse(raw)
    if not isinstance(docs, list) or not docs:
        raise EventError("message is not a non-empty JSON array of events")
    out = []
    for i, doc in enumerate(docs):
        try:
            out.append(ChangeEvent._from_doc(doc))
        except EventError as exc:
            raise EventError(f"event {i} of the message: {exc}") from None
    return out


def pk_text(pk: dict) -> str:
    """A primary key as a stable string (tombstones and locks are keyed by it)."""
    if len(pk) == 1:
        (v,) = pk.values()
        if type(v) is int:  # the common case, without json.dumps: same text
            return f"[{v}]"
    return json.dumps([pk[k] for k in sorted(pk)], separators=(",", ":"), default=str)


# -- the partition of a row: a protocol rule every layer shares ---------------------
def partition_of(table: str, pk_text: str, count: int) -> int:
    """Deterministic: the same row always lands in the same partition, on every re-read."""
    return zlib.crc32(pk_text.encode(), table_seed(table)) % count


def table_seed(table: str) -> int:
    """crc32 of the table's part of a row's partition key: the replicator hashes it once per
    rows event and goes on from it with each row's pk text (crc32 of the concatenation)."""
    return zlib.crc32(f"{table}\x00".encode())
