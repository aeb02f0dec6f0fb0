"""SQL literals for the applier's statements, built without pymysql's per-value chain.

pymysql escapes each argument through four calls (escape, literal,
escape_item, the type's encoder); for the applier's multi-row upserts that was
a quarter of its CPU. Rows are mostly integers and strings: those are written
here directly, with pymysql's own escaping table; every other type (bytes,
decimals, dates, floats, booleans) still goes through the connection's
`literal`, and so does everything on a session in NO_BACKSLASH_ESCAPES mode, except
times (timedelta), which are written here in both modes (`time_literal`).

Rows of only integers, text and NULLs (most rows) are rendered by the C module
(zonesync/_native.c render_rows), with the same escaping, when it is built.
"""

from __future__ import annotations

from datetime import timedelta

from pymysql.constants import SERVER_STATUS
from pymysql.converters import escape_string

try:
    from zonesync import _native
except ImportError:  # not built (scripts/build_native.py): rows are rendered here
    _native = None


def time_literal(value: timedelta) -> str:
    """A TIME literal. pymysql's splits a negative timedelta into its negative days and positive
    seconds and writes -01:30:00 as '-2:30:00'."""
    micros = abs(value) // timedelta(microseconds=1)
    seconds, micro = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    sign = "-" if value < timedelta(0) else ""
    fraction = f".{micro:06d}" if micro else ""
    return f"'{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}{fraction}'"


def literal_function(conn):
    """`literal(value) -> str` for this connection's current SQL mode."""
    slow = conn.literal
    if conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return lambda value: time_literal(value) if type(value) is timedelta else slow(value)

    def literal(value) -> str:
        kind = type(value)
        if kind is int:
            return str(value)
        if kind is str:
            return "'" + escape_string(value) + "'"
        if value is None:
            return "NULL"
        if kind is timedelta:
            return time_literal(value)
        return slow(value)

    literal.backslash_escapes = True  # the C module's escaping (native_renderer)
    return literal


def native_renderer(lit):
    """The C module, when it is built and may render rows for a session whose literals are
    `lit` (its text escaping is the backslash one); else None: rows are rendered in Python."""
    return _native if _native is not None and getattr(lit, "backslash_escapes", False) else None


def row_tuples(rows: list[dict], lit) -> str:
    """`(v, ...), (v, ...)` of rows that share their columns, in that order.

    Through a function compiled once per column count: each value inline, an integer
    formatted without a call, anything else through `lit`. The generic loop (a `lit`
    call per value) was a quarter of the applier's statement building.
    """
    if not rows:
        return ""
    width = len(rows[0])
    native = native_renderer(lit)
    if native is not None:
        text = native.render_rows(rows, width)  # None: a value it does not render
        if text is not None:
            return text
    render = _RENDERERS.get(width)
    if render is None:
        render = _RENDERERS[width] = _compile_renderer(width)
    return render(rows, lit)


_RENDERERS: dict[int, object] = {}


def _compile_renderer(width: int):
    names = [f"v{i}" for i in range(width)]
    cells = ", ".join(f"{{{n} if type({n}) is int else lit({n})}}" for n in names)
    source = "\n".join(
        [
            "def render(rows, lit):",
            "    out = []",
            "    append = out.append",
            "    for row in rows:",
            f"        ({', '.join(names)},) = row.values()",
            f'        append(f"({cells})")',
            '    return ", ".join(out)',
        ]
    )
    env: dict = {}
    exec(compile(source, f"<row tuples of {width} columns>", "exec"), env)  # noqa: S102
    return env["render"]
