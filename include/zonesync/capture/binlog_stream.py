"""The replicator's binlog stream: pymysqlreplication, with a lean path for hot events.

A single-row transaction is four binlog events (GTID, table map, rows, XID).
pymysqlreplication builds a packet wrapper and an event object for each, about
95 µs per transaction here: half of what the replicator spends on one. Those
four kinds have fixed layouts, so the stream reads them itself, straight from
the packet:

- MariaDB GTID and XID: header fields and a few integers;
- a table map whose table id the stream already knows: skipped, as the library
  does with freeze_schema (a table id is re-mapped only by a new binlog file,
  after which the library parses the map again);
- a v1 rows event of a known table the compiled reader (rows.py) covers, with
  full row images: its rows, decoded at once.

The events it returns are subclasses of the library's event classes with the
attributes the library's have (`packet.log_pos`, `packet.flags`, `timestamp`,
`gtid`, `xid`, `schema`, `table`, `rows`), and the stream's `log_pos` moves as
the library's does. Everything else (rotations, format descriptions, queries,
heartbeats, new table maps, tables with other column types, EOF and errors)
is pushed back onto the connection and read by the library's own `fetchone`,
unchanged.
"""

from __future__ import annotations

import select
import struct

import pymysql
from pymysql import err
from pymysql.connections import MAX_PACKET_LEN
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from zonesync.capture.rows import RowDecoder, full_bitmap
from zonesync.events import DELETE, INSERT, UPDATE

ROWS_V1_POST_HEADER = 8  # table id (6) and flags (2)
_HEADER = struct.Struct("<xIBIIIH")  # OK byte, timestamp, type, server id, event size, next position, flags
_EXPECTED_ERRORS = (2013, 2006)  # the library reconnects on these


class StreamConnection(pymysql.connections.Connection):
    """A connection that can be handed back the packet it just read, and reads packets
    with fewer calls than pymysql: pymysql sets the socket's timeout before each of a
    packet's two reads (a system call each), here it is set only when it changes.
    Sequence checks, multi-packet payloads and error packets are handled as pymysql does.
    """

    pushed_back: MysqlPacket | None = None
    _timeout_set = _UNSET = object()

    def _read_packet(self, packet_type=MysqlPacket):
        packet = self.pushed_back
        if packet is not None:
            self.pushed_back = None
            return packet
        if self._timeout_set is not self._read_timeout:
            self._sock.settimeout(self._read_timeout)
            self._timeout_set = self._read_timeout
        payload = b""
        while True:
            header = self._read_exactly(4)
            length = header[0] | header[1] << 8 | header[2] << 16
            if header[3] != self._next_seq_id:
                self._force_close()
                if header[3] == 0:  # MariaDB sends its shutdown error with sequence 0
                    raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
                raise err.InternalError(f"Packet sequence number wrong - got {header[3]} expected {self._next_seq_id}")
            self._next_seq_id = (self._next_seq_id + 1) % 256
            payload += self._read_exactly(length)
            if length < MAX_PACKET_LEN:
                break
        packet = packet_type(payload, self.encoding)
        if packet.is_error_packet():
            if self._result is not None and self._result.unbuffered_active is True:
                self._result.unbuffered_active = False
            packet.raise_for_error()
        return packet

    def _read_exactly(self, size: int) -> bytes:
        try:
            data = self._rfile.read(size)
        except OSError as exc:
            self._force_close()
            raise err.OperationalError(
                CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
            ) from exc
        if len(data) < size:
            self._force_close()
            raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
        return data

    def _write_bytes(self, data):
        self._timeout_set = self._UNSET  # pymysql sets the write timeout here
        super()._write_bytes(data)


class Header:
    __slots__ = ("timestamp", "event_type", "server_id", "event_size", "log_pos", "flags")

    def __init__(self, timestamp, event_type, server_id, event_size, log_pos, flags):
        self.timestamp, self.event_type, self.server_id = timestamp, event_type, server_id
        self.event_size, self.log_pos, self.flags = event_size, log_pos, flags


class LeanGtidEvent(MariadbGtidEvent):
    def __init__(self, header: Header, seq_no: int, domain_id: int, flags: int):
        self.packet, self.event_type, self.timestamp = header, header.event_type, header.timestamp
        self.server_id, self.gtid_seq_no, self.domain_id, self.flags = header.server_id, seq_no, domain_id, flags
        self.gtid = f"{domain_id}-{header.server_id}-{seq_no}"


class LeanXidEvent(XidEvent):
    def __init__(self, header: Header, xid: int):
        self.packet, self.event_type, self.timestamp, self.xid = header, header.event_type, header.timestamp, xid


class _LeanRows:
    """Shared by the three lean rows events: `decoded` is [(before, after)] per row."""

    def __init__(self, header: Header, table, table_id: int, decoded: list, plain: bool = False):
        self.packet, self.event_type, self.timestamp = header, header.event_type, header.timestamp
        self.table_id, self.schema, self.table = table_id, table.schema, table.table
        self.columns, self.decoded, self.plain = table.columns, decoded, plain

    @property
    def rows(self):
        """The library's format. none_sources says "null" for every None: a zero date
        (which the library reports as out of range) cannot be told from NULL here."""

        def nones(image):
            return {k: "null" for k, v in image.items() if v is None}

        if isinstance(self, UpdateRowsEvent):
            return [
                {"before_values": b, "before_none_sources": nones(b), "after_values": a, "after_none_sources": nones(a)}
                for b, a in self.decoded
            ]
        return [
            {"values": image, "none_sources": nones(image)}
            for image in (a if b is None else b for b, a in self.decoded)
        ]


class LeanWriteRowsEvent(_LeanRows, WriteRowsEvent):
    pass


class LeanUpdateRowsEvent(_LeanRows, UpdateRowsEvent):
    pass


class LeanDeleteRowsEvent(_LeanRows, DeleteRowsEvent):
    pass


# v1 rows event type -> (the library's class, ours, the change it carries)
ROWS_V1 = {
    BINLOG.WRITE_ROWS_EVENT_V1: (WriteRowsEvent, LeanWriteRowsEvent, INSERT),
    BINLOG.UPDATE_ROWS_EVENT_V1: (UpdateRowsEvent, LeanUpdateRowsEvent, UPDATE),
    BINLOG.DELETE_ROWS_EVENT_V1: (DeleteRowsEvent, LeanDeleteRowsEvent, DELETE),
}
_SKIP = object()


class ServerChanged(RuntimeError):
    """The server answering at the stream's address is not the one the pass began on."""


class CheckedStreamConnection(StreamConnection):
    """A stream connection that refuses a server other than `expected_server_id`: the
    library reconnects on a lost connection at the same position, and a virtual IP moved
    to a promoted replica in between would serve positions that mean nothing there
    (docs/failover.md). The pass ends instead, and its next start checks the server."""

    expected_server_id: int | None = None

    def connect(self, sock=None):
        super().connect(sock)
        with self.cursor(pymysql.cursors.Cursor) as cur:  # (the library's connections default to dict rows)
            cur.execute("SELECT @@GLOBAL.server_id")
            found = int(cur.fetchone()[0])
        if found != self.expected_server_id:
            self.close()
            raise ServerChanged(f"{self.host}:{self.port} is now server_id {found}, not {self.expected_server_id}")


class LeanBinLogStreamReader(BinLogStreamReader):
    """BinLogStreamReader whose hot events skip the library's per-event objects.

    Takes the library's arguments; the lean path serves only the options the
    replicator uses (only_schemas, freeze_schema, only_events): with any other
    filter or stop condition every event goes through the library.
    """

    def __init__(self, *args, row_decoder: RowDecoder | None = None, expected_server_id: int | None = None, **kwargs):
        kwargs["pymysql_wrapper"] = StreamConnection
        if expected_server_id is not None:  # every (re)connection checks which server answers
            kwargs["pymysql_wrapper"] = type("CheckedStreamConnection", (CheckedStreamConnection,),
                                             {"expected_server_id": expected_server_id})  # fmt: skip
        super().__init__(*args, **kwargs)
        self.rows = row_decoder or RowDecoder()
        self._only_schemas = kwargs.get("only_schemas")
        self._allowed = self._BinLogStreamReader__allowed_events
        self._lean = (
            kwargs.get("freeze_schema", False)
            and not kwargs.get("end_log_pos")
            and not kwargs.get("skip_to_timestamp")
            and not any(kwargs.get(k) for k in ("only_tables", "ignored_tables", "ignored_schemas"))
        )
        self.lean_events = 0

    def fetchone(self):
        while True:
            if not self._lean or not self._BinLogStreamReader__connected_stream:
                return super().fetchone()  # connects (and resumes from log_file/log_pos)
            connection = self._stream_connection
            try:
                packet = connection._read_packet()
            except pymysql.OperationalError as error:
                if error.args[0] not in _EXPECTED_ERRORS:
                    raise
                # as the library does: drop the stream; the next call reconnects from log_pos
                connection.close()
                self._BinLogStreamReader__connected_stream = False
                continue
            event = self._lean_event(packet)
            if event is _SKIP:
                continue
            if event is not None:
                self.lean_events += 1
                return event
            connection.pushed_back = packet
            return super().fetchone()

    def data_ready(self) -> bool:
        """Whether more of the binlog has already arrived: the socket holds unread bytes.

        The replicator publishes what it has buffered when the answer is no: a burst
        (a catch-up, a bulk load) fills messages, a quiet stream sends each transaction
        at once. Bytes already in the reader's buffer are not seen here, so the answer
        can be a no while a transaction or two are still buffered: messages are then a
        little smaller, never late.
        """
        connection = self._stream_connection if self._BinLogStreamReader__connected_stream else None
        if connection is None or connection._sock is None:
            return False
        if connection.pushed_back is not None:
            return True
        try:
            return bool(select.select([connection._sock], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def _lean_event(self, packet):
        data = packet._data
        if len(data) < 20 or data[0] != 0:
            return None  # EOF, an error: the library's
        header = Header(*_HEADER.unpack_from(data, 0))
        kind = header.event_type
        end = 1 + header.event_size - (4 if self._BinLogStreamReader__use_checksum else 0)
        if end > len(data):
            return None
        if kind == BINLOG.XID_EVENT:
            if XidEvent not in self._allowed:
                return None
            self._advance(header)
            return LeanXidEvent(header, struct.unpack_from("<Q", data, 20)[0])
        if kind == BINLOG.MARIADB_GTID_EVENT:
            if MariadbGtidEvent not in self._allowed:
                return None
            seq_no, domain_id, flags = struct.unpack_from("<QIB", data, 20)
            self._advance(header)
            return LeanGtidEvent(header, seq_no, domain_id, flags)
        if kind == BINLOG.TABLE_MAP_EVENT:
            if _table_id(data) not in self.table_map:
                return None  # a new map: the library parses and registers it
            self._advance(header)
            return _SKIP  # freeze_schema: a known table id keeps its map
        if kind not in ROWS_V1:
            return None
        library_class, lean_class, change = ROWS_V1[kind]
        if library_class not in self._allowed or not self._standard_post_header(kind):
            return None
        table_id = _table_id(data)
        table = self.table_map.get(table_id)
        if table is None:
            return None
        if self._only_schemas is not None and table.schema not in self._only_schemas:
            self._advance(header)
            return _SKIP  # filtered, as the library filters it
        read = self.rows.reader(table)
        if read is None:
            return None
        pos, count = _length_coded(data, 28)
        if count != len(table.columns):
            return None
        full = full_bitmap(count)
        width = len(full)
        bitmaps = 2 if change == UPDATE else 1
        for n in range(bitmaps):
            if data[pos + n * width : pos + (n + 1) * width] != full:
                return None  # a partial row image
        try:
            decoded = self.rows.decode(table, read, change, data, pos + bitmaps * width, end)
        except Exception:  # noqa: BLE001 - anything unexpected: the library reads it
            return None
        if decoded is None:
            return None
        self._advance(header)
        return lean_class(header, table, table_id, decoded, self.rows.plain(table))

    def _advance(self, header: Header) -> None:
        if header.log_pos:
            self.log_pos = header.log_pos

    def _standard_post_header(self, kind: int) -> bool:
        lengths = self._BinLogStreamReader__post_header_lengths
        return not lengths or len(lengths) < kind or lengths[kind - 1] == ROWS_V1_POST_HEADER


def _table_id(data: bytes) -> int:
    return int.from_bytes(data[20:26], "little")


def _length_coded(data: bytes, pos: int) -> tuple[int, int]:
    """(position after it, value) of a length-coded integer."""
    first = data[pos]
    if first < 251:
        return pos + 1, first
    size = {252: 2, 253: 3, 254: 8}[first]
    return pos + 1 + size, int.from_bytes(data[pos + 1 : pos + 1 + size], "little")


def open_reader(rows: RowDecoder, source, server_id: int, holder: str, log_file: str, log_pos: int,
                expected_server_id: int | None = None):  # fmt: skip
    """The replicator's stream from (log_file, log_pos) of `source` (a SourceDB): blocking,
    with heartbeats, registered under the lease holder's name, its schemas only; with
    `expected_server_id`, never from another server (CheckedStreamConnection)."""
    return LeanBinLogStreamReader(
        row_decoder=rows,
        expected_server_id=expected_server_id,
        connection_settings=source.settings(),
        server_id=server_id,
        report_slave=holder,
        resume_stream=True,
        log_file=log_file,
        log_pos=log_pos,
        blocking=True,
        slave_heartbeat=0.25,
        # A table map is parsed once per table id: a table's id changes with its
        # definition (ALTER makes a new table share), and the library forgets every
        # map at each binlog rotation (ids restart after a server restart, which
        # always starts a new file). Re-parsing it for every transaction was half of
        # the CPU of single-row transactions.
        freeze_schema=True,
        only_events=[
            GtidEvent,
            MariadbGtidEvent,
            XidEvent,
            QueryEvent,
            RotateEvent,
            HeartbeatLogEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
        ],
        only_schemas=source.schemas,
    )
