"""Files the user points at: every way one is unusable is one line naming the file and the fix."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from zonesync.runtime import transport
from zonesync.user_files import BINARY, DENIED, DIRECTORY, MISSING, NOT_UTF8, UserFileError, read_user_text

pytestmark = pytest.mark.unit


def refused(path, what="rules file") -> UserFileError:
    with pytest.raises(UserFileError) as err:
        read_user_text(path, what)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path} ({what}): "), text
    assert err.value.problem in text
    return err.value


def test_utf8_text_is_read_and_a_bom_is_dropped(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_bytes("zone: é\n".encode())
    assert read_user_text(f) == "zone: é\n"
    f.write_bytes(codecs.BOM_UTF8 + "zone: é\n".encode())
    assert read_user_text(f) == "zone: é\n"
    f.write_bytes(b"")
    assert read_user_text(f) == ""  # whether empty is fine is the caller's call


def test_latin1_names_the_byte_offset_line_and_the_fix(tmp_path):
    f = tmp_path / "rules.yaml"
    f.write_bytes(b"rules:\n  - zone: caf" + "é".encode("latin-1") + b"\n")
    err = refused(f)
    assert err.reason == NOT_UTF8
    assert "byte 0xe9 ('é' in Latin-1) at offset 20 (line 2, column 14)" in err.problem
    assert "must be UTF-8 text" in err.problem and f"iconv -f latin1 -t utf-8 {f} > {f}.utf8" in err.problem


def test_offsets_count_the_bom_and_columns_count_characters(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_bytes(codecs.BOM_UTF8 + "é: ".encode() + b"\xff")
    assert "byte 0xff ('ÿ' in Latin-1) at offset 7 (line 1, column 4)" in refused(f).problem


def test_binary_names_the_first_bad_byte(tmp_path):
    f = tmp_path / "dump.bin"
    f.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    err = refused(f)
    assert err.reason == BINARY
    assert "looks binary: byte 0x89 at offset 0 (line 1, column 1) is not text" in err.problem
    assert "must be UTF-8 text" in err.problem and "right file" in err.problem
    f.write_bytes(b"zsid_space:\n\x00\x01")
    assert "byte 0x00 at offset 12 (line 2, column 1)" in refused(f).problem


def test_utf16_says_so(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_bytes("rules: []".encode("utf-16"))
    err = refused(f)
    assert err.reason == NOT_UTF8 and "UTF-16" in err.problem and "iconv -f utf-16 -t utf-8" in err.problem


def test_missing_directory_and_unreadable(tmp_path, monkeypatch):
    assert refused(tmp_path / "nope.yaml").reason == MISSING
    err = refused(tmp_path)
    assert err.reason == DIRECTORY and "is a directory" in err.problem
    f = tmp_path / "secret.yaml"
    f.write_text("x: 1\n")

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    err = refused(f)
    assert err.reason == DENIED and "make it readable by user" in err.problem


def test_names_the_path_alone_without_what(tmp_path):
    with pytest.raises(UserFileError, match=r"^/\S+nope: cannot read the file: it does not exist: check the path$"):
        read_user_text(tmp_path / "nope")


@pytest.mark.parametrize(
    "content, words",
    [
        (b"\xff\xfe", "must be UTF-8 text"),
        (b"", 'not JSON with a "bootstrap" string'),
        (b'["127.0.0.1:9092"]', 'not JSON with a "bootstrap" string'),
        (b'{"bootstrap": 9092}', 'not JSON with a "bootstrap" string'),
    ],
)
def test_kafka_bootstrap_file_is_one_line(tmp_path, content, words):
    f = tmp_path / "broker.json"
    f.write_bytes(content)
    with pytest.raises(transport.TransportError) as err:
        transport.bootstrap({"ZONESYNC_KAFKA_BOOTSTRAP_FILE": str(f)})
    text = str(err.value)
    assert words in text and str(f) in text and "ZONESYNC_KAFKA_BOOTSTRAP_FILE" in text and "\n" not in text


def test_kafka_bootstrap_file_missing_directory_and_good(tmp_path):
    with pytest.raises(transport.TransportError, match="start the dev broker"):
        transport.bootstrap({"ZONESYNC_KAFKA_BOOTSTRAP_FILE": str(tmp_path / "none.json")})
    with pytest.raises(transport.TransportError, match="is a directory"):
        transport.bootstrap({"ZONESYNC_KAFKA_BOOTSTRAP_FILE": str(tmp_path)})
    f = tmp_path / "broker.json"
    f.write_bytes(codecs.BOM_UTF8 + b'{"bootstrap": "127.0.0.1:9092"}')
    assert transport.bootstrap({"ZONESYNC_KAFKA_BOOTSTRAP_FILE": str(f)}) == "127.0.0.1:9092"
