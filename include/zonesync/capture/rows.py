"""Decoding a rows event's row images: a reader compiled once per table map.

pymysqlreplication decodes every column of every row through a chain of
generic calls (a packet read, a bitmap test, a type dispatch), about 27 µs
per row here: most of the replicator's CPU for bulk changes. The binlog's row
format is fixed by the table map, so for each table map we compile a Python
function that reads one row image straight from the event's bytes: the
fixed-width columns of a row without NULLs with one `struct` call, strings by
their length prefix, nothing dispatched per column.

The compiled reader returns exactly what the library returns (the same
Python values, the same charset decoding; a test compares them column type by
column type), so the rest of the replicator cannot tell which one decoded an
event. It covers the column types tables are made of (integers, floats,
decimals, strings, blobs, dates, datetimes, timestamps); any other type, a
partial row image (binlog_row_image other than FULL), a column without a name,
or any error while reading sends the event to the library, which reads it from
the same untouched packet.
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import struct

from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent, WriteRowsEvent

from zonesync.capture.native_rows import NativeRows, NativeSpec, native_spec
from zonesync.capture.row_images import decode_rows
from zonesync.events import DELETE, INSERT, UPDATE

# Fixed-width columns: struct format per (type, unsigned).
_FIXED = {
    (FIELD_TYPE.TINY, False): "b",
    (FIELD_TYPE.TINY, True): "B",
    (FIELD_TYPE.SHORT, False): "h",
    (FIELD_TYPE.SHORT, True): "H",
    (FIELD_TYPE.LONG, False): "i",
    (FIELD_TYPE.LONG, True): "I",
    (FIELD_TYPE.LONGLONG, False): "q",
    (FIELD_TYPE.LONGLONG, True): "Q",
    (FIELD_TYPE.FLOAT, False): "f",
    (FIELD_TYPE.FLOAT, True): "f",
    (FIELD_TYPE.DOUBLE, False): "d",
    (FIELD_TYPE.DOUBLE, True): "d",
}
_ROWS_V1 = (BINLOG.WRITE_ROWS_EVENT_V1, BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.DELETE_ROWS_EVENT_V1)
_ROWS_V2 = (BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2, BINLOG.DELETE_ROWS_EVENT_V2)
_FSP_BYTES = (0, 1, 1, 2, 2, 3, 3)


class Unsupported(Exception):
    """This table's rows are left to the library."""


# -- the library's value rules, as functions the compiled readers call ------------------
def _fsp(buf, pos, fsp):
    """Fractional seconds: (microseconds, new pos), as the library reads them."""
    size = _FSP_BYTES[fsp]
    if not size:
        return 0, pos
    value = int.from_bytes(buf[pos : pos + size], "big", signed=True)
    if fsp % 2:
        value = int(value / 10)
    return value * (10 ** (6 - fsp)), pos + size


def _datetime2(buf, pos, fsp):
    data = int.from_bytes(buf[pos : pos + 5], "big")
    pos += 5
    year_month = (data >> 22) & 0x1FFFF
    try:
        value = datetime.datetime(
            year=int(year_month / 13),
            month=year_month % 13,
            day=(data >> 17) & 0x1F,
            hour=(data >> 12) & 0x1F,
            minute=(data >> 6) & 0x3F,
            second=data & 0x3F,
        )
    except ValueError:
        return None, _fsp(buf, pos, fsp)[1]
    micro, pos = _fsp(buf, pos, fsp)
    return (value.replace(microsecond=micro) if micro > 0 else value), pos


def _timestamp2(buf, pos, fsp):
    value = datetime.datetime.utcfromtimestamp(int.from_bytes(buf[pos : pos + 4], "big", signed=True))
    micro, pos = _fsp(buf, pos + 4, fsp)
    return (value.replace(microsecond=micro) if micro > 0 else value), pos


def _date(buf, pos):
    raw = int.from_bytes(buf[pos : pos + 3], "little")
    year, month, day = (raw >> 9) & 0x7FFF, (raw >> 5) & 0xF, raw & 0x1F
    if raw == 0 or year == 0 or month == 0 or day == 0:
        return None, pos + 3
    return datetime.date(year, month, day), pos + 3


def _time2(buf, pos, fsp):
    """TIME(fsp) as MySQL 5.6+ and MariaDB write it: the packed hours/minutes/seconds and the
    fraction's bytes form one big-endian number offset by its top bit (a negative time is its
    two's complement, so a fraction makes the whole-second part one less: mysys/my_time.cc,
    my_time_packed_from_binary)."""
    frac_bytes = _FSP_BYTES[fsp]
    size = 3 + frac_bytes
    packed = int.from_bytes(buf[pos : pos + size], "big") - (1 << (8 * size - 1))
    hms, frac = divmod(abs(packed), 1 << (8 * frac_bytes))
    value = datetime.timedelta(
        hours=(hms >> 12) & 0x3FF,
        minutes=(hms >> 6) & 0x3F,
        seconds=hms & 0x3F,
        microseconds=frac * 10 ** (6 - 2 * frac_bytes),
    )
    return (-value if packed < 0 else value), pos + size


def _library_time2(self, column):
    # pymysqlreplication 1.0.17 negates the whole-second part alone, so a negative TIME with a
    # fraction came out wrong (-00:00:00.000001 as -00:00:00.999999); its reader is replaced.
    return _time2(self.packet.read(3 + _FSP_BYTES[column.fsp]), 0, column.fsp)[0]


RowsEvent._RowsEvent__read_time2 = _library_time2


_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_reader(precision: int, decimals: int):
    """MySQL's packed decimal: groups of 9 digits in 4 bytes, big-endian, sign in the top bit."""
    integral = precision - decimals
    whole_int, part_int = divmod(integral, 9)
    whole_frac, part_frac = divmod(decimals, 9)
    size = _DECIMAL_BYTES[part_int] + whole_int * 4 + whole_frac * 4 + _DECIMAL_BYTES[part_frac]

    def read(buf, pos):
        raw = bytearray(buf[pos : pos + size])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        mask = -1 if negative else 0
        out = ["-"] if negative else []
        at = 0
        n = _DECIMAL_BYTES[part_int]
        if n:
            out.append(str(int.from_bytes(raw[at : at + n], "big", signed=True) ^ mask))
            at += n
        for _ in range(whole_int):
            out.append(f"{int.from_bytes(raw[at : at + 4], 'big', signed=True) ^ mask:09d}")
            at += 4
        out.append(".")
        for _ in range(whole_frac):
            out.append(f"{int.from_bytes(raw[at : at + 4], 'big', signed=True) ^ mask:09d}")
            at += 4
        n = _DECIMAL_BYTES[part_frac]
        if n:
            out.append(f"{int.from_bytes(raw[at : at + n], 'big', signed=True) ^ mask:0{part_frac}d}")
        return decimal.Decimal("".join(out)), pos + size

    return read


def _encoding(column) -> str | None:
    """The codec the library decodes this column's text with; None keeps the bytes."""
    if column.character_set_name is None:
        return "utf-8"
    encoding = RowsEvent.charset_to_encoding(column.character_set_name)
    try:
        codecs.lookup(encoding)
    except LookupError:
        return None
    return encoding


# -- compiling one table map -----------------------------------------------------------
def _compile_image(columns) -> callable:
    """Source of `read(buf, pos) -> (row dict, pos)` for one full row image."""
    env: dict = {"unpack_from": struct.unpack_from, "from_bytes": int.from_bytes}
    count = len(columns)
    null_bytes = (count + 7) // 8
    # One step per column: (fixed struct char or None, lines that read v{i} at pos).
    steps: list[tuple[str | None, list[str]]] = []
    for i, col in enumerate(columns):
        if not col.name:
            raise Unsupported(f"column {i} has no name")
        fmt = _FIXED.get((col.type, bool(col.unsigned)))
        if fmt:
            size = struct.calcsize("<" + fmt)
            steps.append((fmt, [f"v{i} = unpack_from('<{fmt}', buf, pos)[0]", f"pos += {size}"]))
        elif col.type == FIELD_TYPE.INT24:
            signed = not col.unsigned
            steps.append((None, [f"v{i} = from_bytes(buf[pos:pos + 3], 'little', signed={signed})", "pos += 3"]))
        elif col.type in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
            prefix = col.length_size if col.type == FIELD_TYPE.BLOB else (2 if col.max_length > 255 else 1)
            encoding = _encoding(col)
            length = "buf[pos]" if prefix == 1 else f"from_bytes(buf[pos:pos + {prefix}], 'little')"
            text = f"buf[pos + {prefix}:pos + {prefix} + n]"
            # (binary: the bytes, b'' when empty. The library gives '' for no bytes, as
            # Python never looks an unknown codec up for empty input; the target reads the
            # column back as b'', and an old image must compare equal to it: binary_empty)
            value = f"{text}.decode({encoding!r})" if encoding else text
            steps.append((None, [f"n = {length}", f"v{i} = {value}", f"pos += {prefix} + n"]))
        elif col.type in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2):
            env[f"r{i}"] = _datetime2 if col.type == FIELD_TYPE.DATETIME2 else _timestamp2
            steps.append((None, [f"v{i}, pos = r{i}(buf, pos, {int(col.fsp)})"]))
        elif col.type == FIELD_TYPE.DATE:
            env[f"r{i}"] = _date
            steps.append((None, [f"v{i}, pos = r{i}(buf, pos)"]))
        elif col.type == FIELD_TYPE.NEWDECIMAL:
            env[f"r{i}"] = _decimal_reader(col.precision, col.decimals)
            steps.append((None, [f"v{i}, pos = r{i}(buf, pos)"]))
        else:
            raise Unsupported(f"column {col.name} has type {col.type}")

    lines = [
        "def read(buf, pos):",
        f"    nulls = from_bytes(buf[pos:pos + {null_bytes}], 'little')",
        f"    pos += {null_bytes}",
    ]
    # Without NULLs (the common row): runs of fixed-width columns in one struct call each.
    lines.append("    if not nulls:")
    i = 0
    while i < count:
        fmt, body = steps[i]
        if fmt is None:
            lines += [f"        {line}" for line in body]
            i += 1
            continue
        j = i
        while j < count and steps[j][0]:
            j += 1
        run = "".join(steps[k][0] for k in range(i, j))
        env[f"s{i}"] = struct.Struct("<" + run)
        names = ", ".join(f"v{k}" for k in range(i, j))
        lines += [f"        ({names},) = s{i}.unpack_from(buf, pos)", f"        pos += {env[f's{i}'].size}"]
        i = j
    row = "{" + ", ".join(f"{col.name!r}: v{k}" for k, col in enumerate(columns)) + "}"
    lines.append(f"        return {row}, pos")
    # With NULLs: column by column; a NULL column takes no bytes.
    for k, (_, body) in enumerate(steps):
        lines.append(f"    if nulls & {1 << k}:")
        lines.append(f"        v{k} = None")
        lines.append("    else:")
        lines += [f"        {line}" for line in body]
    lines.append(f"    return {row}, pos")
    exec(compile("\n".join(lines), f"<row reader {len(columns)} columns>", "exec"), env)  # noqa: S102
    return env["read"]


class RowDecoder:
    """Row images of rows events, through a reader compiled once per table map."""

    def __init__(self):
        # id(Table) -> reader, or None when the library reads this table. The
        # Table object is what a table map parsed into; the stream keeps it for as
        # long as that table id is in use (see the replicator's freeze_schema).
        # (the Table, its reader, whether the reader's images are plain, the C module's spec)
        self._readers: dict[int, tuple[object, callable | None, bool, NativeSpec | None]] = {}
        self.fallbacks = 0

    def reader(self, table):
        """The compiled reader of a table map's row image, or None (the library's)."""
        return self._entry(table)[1]

    def plain(self, table) -> bool:
        """Whether the compiled reader gives only JSON's own values for this table map (ints,
        floats, text, NULL): its row images need no tagging (event.encode_row)."""
        return self._entry(table)[2]

    def native(self, table) -> NativeSpec | None:
        """The C module's spec of a table map (native_rows.py), or None (the Python reader's)."""
        return self._entry(table)[3]

    def _entry(self, table) -> tuple[object, callable | None, bool, NativeSpec | None]:
        cached = self._readers.get(id(table))
        if cached is not None and cached[0] is table:
            return cached
        if len(self._readers) >= 1024:
            self._readers.clear()  # table maps of binlog files long read
        try:
            reader = _compile_image(table.columns)
        except Unsupported:
            reader = None
        plain = reader is not None and all(_plain_column(col) for col in table.columns)
        spec = native_spec(table.columns, _encoding) if reader is not None else None
        entry = self._readers[id(table)] = (table, reader, plain, spec)
        return entry

    def images(self, ev) -> list[tuple[dict | None, dict | None]]:
        """(before, after) per row: (None, new) for an insert, (old, None) for a delete."""
        decoded = getattr(ev, "decoded", None)  # read by the lean stream (binlog_stream.py)
        if decoded is not None:
            return decoded
        try:
            fast = self._fast(ev)
        except Exception:  # noqa: BLE001 - anything unexpected: the library reads the same bytes
            fast = None
        if fast is not None:
            return fast
        self.fallbacks += 1
        binary = binary_columns(ev.columns)
        if isinstance(ev, WriteRowsEvent):
            return [(None, binary_empty(r["values"], binary)) for r in ev.rows]
        if isinstance(ev, UpdateRowsEvent):
            return [
                (binary_empty(r["before_values"], binary), binary_empty(r["after_values"], binary)) for r in ev.rows
            ]
        return [(binary_empty(r["values"], binary), None) for r in ev.rows]

    def _fast(self, ev) -> list | None:
        if ev.event_type not in _ROWS_V1 and ev.event_type not in _ROWS_V2:
            return None
        read = self.reader(ev.table_map[ev.table_id])
        if read is None:
            return None
        if getattr(ev, "_RowsEvent__rows", None) is not None:
            return None  # the library already read the rows (ev.rows): the packet is consumed
        wrapper = ev.packet
        if getattr(wrapper, "_BinLogPacketWrapper__data_buffer", b""):
            return None  # bytes pushed back into the wrapper: not a plain position in the packet
        update = isinstance(ev, UpdateRowsEvent)
        full = full_bitmap(len(ev.columns))
        if ev.columns_present_bitmap != full or (update and ev.columns_present_bitmap2 != full):
            return None  # a partial row image
        raw = wrapper.packet
        kind = UPDATE if update else INSERT if isinstance(ev, WriteRowsEvent) else DELETE
        start, end = raw._position, raw._position + ev.event_size - wrapper.read_bytes
        return self.decode(ev.table_map[ev.table_id], read, kind, raw._data, start, end)

    def decode(self, table, read, kind: str, buf: bytes, pos: int, end: int):
        """The row images from pos to end: kept as bytes for the C module when it reads this
        table map and they check out (NativeRows), else decoded by `read`; None when they do
        not end exactly at end."""
        spec = self.native(table)
        native = NativeRows.check(spec, read, buf, pos, end, kind) if spec is not None else None
        return native if native is not None else decode_rows(read, kind, buf, pos, end)


def binary_columns(columns) -> list[str]:
    """Names of the string columns the library keeps as bytes (no codec: BLOB, VARBINARY)."""
    kinds = (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
    return [col.name for col in columns if col.type in kinds and _encoding(col) is None]


def binary_empty(row: dict, binary: list[str]) -> dict:
    """The library's '' for an empty binary value, as the bytes it is (b''): the target
    reads that column back as bytes, and an update's old image must equal what it reads."""
    for name in binary:
        if row.get(name) == "":
            row[name] = b""
    return row


def _plain_column(col) -> bool:
    if (col.type, bool(col.unsigned)) in _FIXED or col.type == FIELD_TYPE.INT24:
        return True
    # text with a known codec decodes to str; without one the bytes are kept (tagged)
    return col.type in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB) and _encoding(col) is not None


def full_bitmap(count: int) -> bytes:
    """The columns-present bitmap of a full row image of `count` columns."""
    return b"\xff" * (count // 8) + (bytes([(1 << (count % 8)) - 1]) if count % 8 else b"")
