"""The C module's checks: what it cannot read exactly as the Python reader would, it refuses.

walk_rows runs on every rows event of a covered table before its bytes are kept: a
refused event (-1) is decoded by the Python reader, which falls back to the library.
"""

from __future__ import annotations

import struct

import pytest

from zonesync import _native  # built by `make setup` (scripts/build_native.py)

pytestmark = pytest.mark.unit

SPEC = (bytes([9, 21]), (b'"id":', b'"v":'))  # BIGINT, VARCHAR(<256) as UTF-8 text


def image(id_: int, text: bytes | None) -> bytes:
    if text is None:
        return b"\x02" + struct.pack("<q", id_)
    return b"\x00" + struct.pack("<q", id_) + bytes([len(text)]) + text


def walk(data: bytes, op: int = 0) -> int:
    return _native.walk_rows(*SPEC, data, 0, len(data), op)


def test_rows_that_end_where_the_event_ends_are_counted():
    assert walk(image(1, b"a") + image(2, None) + image(3, "zoné ✓".encode())) == 3
    assert walk(image(1, b"a") + image(1, b"b"), op=1) == 1  # an update: before and after


@pytest.mark.parametrize(
    "data",
    [
        image(1, b"\xff\xfe"),  # not UTF-8
        image(1, b"\xed\xa0\x80"),  # a UTF-16 surrogate: Python's strict decoder refuses it
        image(1, b"\xc0\xaf"),  # an overlong encoding
        image(1, b"abc")[:-1],  # cut short
        image(1, b"abc") + b"\x00",  # bytes after the last row
        image(1, b"a") + image(2, b"b")[:5],  # a second row cut short
        image(1, b"a"),  # an update needs two images
    ],
)
def test_anything_else_is_refused(data):
    op = 1 if data == image(1, b"a") else 0
    assert walk(data, op) == -1


def test_bad_arguments_are_errors_not_crashes():
    with pytest.raises(TypeError):
        _native.walk_rows(b"\x09", (b'"id":', b'"v":'), b"", 0, 0, 0)  # a name per column
    with pytest.raises(ValueError):
        _native.walk_rows(*SPEC, b"", 0, 0, 7)  # no such op
    assert _native.walk_rows(*SPEC, b"abc", 2, 9, 0) == -1  # a range past the data


def test_load_data_text_escapes_what_load_data_reads_back_and_refuses_the_rest():
    rows = [{"a": 1, "b": "t\tn\nr\rz\x00b\\", "c": None}, {"a": -(2**63), "b": "\\N", "c": "é"}]
    assert _native.render_tsv(rows, ("a", "b", "c")) == (
        b"1\tt\\tn\\nr\\rz\\0b\\\\\t\\N\n-9223372036854775808\t\\\\N\t\xc3\xa9\n"
    )
    assert _native.render_tsv([{"a": 2**63}], ("a",)) is None  # past a BIGINT: the INSERT's
    assert _native.render_tsv([{"a": 1.5}], ("a",)) is None
    assert _native.render_tsv([{"b": 1, "a": 2}], ("a", "b")) is None  # other columns, or order
    assert _native.render_tsv([{"a": 1}, {"a": 1, "b": 2}], ("a",)) is None
