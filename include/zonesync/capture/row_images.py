"""Walking a rows event's row images with a reader compiled for its table map (rows.py).

Both row readers use it: the Python path (rows.RowDecoder) to decode an event, and the
C module's path (native_rows.NativeRows) when something asks for the images it kept as
bytes. It sits below both so that neither imports the other backwards.
"""

from __future__ import annotations

from zonesync.events import INSERT, UPDATE


def decode_rows(read, kind: str, buf: bytes, pos: int, end: int) -> list | None:
    """Every row image from pos to end; None when they do not end exactly at end."""
    out = []
    if kind == UPDATE:
        while pos < end:
            before, pos = read(buf, pos)
            after, pos = read(buf, pos)
            out.append((before, after))
    elif kind == INSERT:
        while pos < end:
            row, pos = read(buf, pos)
            out.append((None, row))
    else:
        while pos < end:
            row, pos = read(buf, pos)
            out.append((row, None))
    return out if pos == end else None
