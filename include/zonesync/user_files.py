"""Reading a text file the user pointed at (a command-line argument, an env var).

Every way such a file can be unusable ends in one `UserFileError` whose message
names the file, what is wrong and the fix, so the command prints one line
instead of a traceback: missing, a directory, unreadable, not UTF-8 (with the
byte offset and line of the first bad byte and an `iconv` line to convert it),
binary, UTF-16. A UTF-8 byte-order mark (what some Windows editors write) is
accepted and dropped. Whether an empty file is acceptable is the caller's call.
"""

from __future__ import annotations

import codecs
import os
import shlex
from pathlib import Path

MISSING, DIRECTORY, DENIED, UNREADABLE, BINARY, NOT_UTF8 = (
    "missing",
    "directory",
    "denied",
    "unreadable",
    "binary",
    "not-utf8",
)
_SNIFF = 8192  # like git: a NUL byte in the first 8 KiB means binary


class UserFileError(ValueError):
    """A user-given file cannot be read as UTF-8 text.

    `reason` is one of MISSING, DIRECTORY, DENIED, UNREADABLE, BINARY, NOT_UTF8;
    `problem` is the message without the file name (for callers that report the
    file their own way); str() is the whole line.
    """

    def __init__(self, path: Path, what: str, reason: str, problem: str):
        self.path = path
        self.what = what
        self.reason = reason
        self.problem = problem
        super().__init__(f"{path} ({what}): {problem}" if what else f"{path}: {problem}")


def read_user_text(path: str | os.PathLike, what: str = "") -> str:
    """The text of `path`, decoded as UTF-8 (a leading BOM dropped), or UserFileError.

    `what` says which file it is in the message, e.g. "rules file" or
    "ZONESYNC_KAFKA_BOOTSTRAP_FILE".
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserFileError(path, what, MISSING, "cannot read the file: it does not exist: check the path") from None
    except IsADirectoryError:
        raise UserFileError(
            path, what, DIRECTORY, "cannot read the file: it is a directory: give the path of a file"
        ) from None
    except PermissionError:
        raise UserFileError(
            path, what, DENIED, f"cannot read the file: permission denied: make it readable by user {_user()}"
        ) from None
    except OSError as exc:
        raise UserFileError(path, what, UNREADABLE, f"cannot read the file: {exc.strerror or exc}") from None
    return _decode(data, path, what)


def _decode(data: bytes, path: Path, what: str) -> str:
    """`data` (the bytes of `path`) as UTF-8 text, or UserFileError naming the first bad byte."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise UserFileError(
            path,
            what,
            NOT_UTF8,
            "the file is UTF-16 text, it must be UTF-8 text: re-save it as UTF-8, e.g. "
            f"iconv -f utf-16 -t utf-8 {_q(path)} > {_q(path, '.utf8')} and use that",
        )
    text, bad = None, None
    try:
        text = data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = skip + exc.start
    nul = data.find(b"\0", 0, _SNIFF)
    if nul >= 0:  # binary: name its first byte that is not text
        first = nul if bad is None else min(nul, bad)
        raise UserFileError(
            path,
            what,
            BINARY,
            f"the file looks binary: byte 0x{data[first]:02x} at {_where(data, first, skip)} is not text; "
            "the file must be UTF-8 text: check that this is the right file",
        )
    if bad is not None:
        byte = data[bad]
        latin1 = bytes([byte]).decode("latin-1")
        shown = f" ({latin1!r} in Latin-1)" if latin1.isprintable() else ""
        raise UserFileError(
            path,
            what,
            NOT_UTF8,
            f"not UTF-8: byte 0x{byte:02x}{shown} at {_where(data, bad, skip)}; the file must be UTF-8 text: "
            f"re-save it as UTF-8, e.g. iconv -f latin1 -t utf-8 {_q(path)} > {_q(path, '.utf8')} and use that",
        )
    assert text is not None
    return text


def _where(data: bytes, offset: int, skip: int) -> str:
    """Byte offset, line and column (in characters: all before `offset` is valid UTF-8)."""
    start = max(data.rfind(b"\n", 0, offset) + 1, skip)
    line = data.count(b"\n", 0, offset) + 1
    column = len(data[start:offset].decode("utf-8", errors="replace")) + 1
    return f"offset {offset} (line {line}, column {column})"


def _q(path: Path, suffix: str = "") -> str:
    return shlex.quote(str(path) + suffix)


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for this uid
        return str(os.getuid())
