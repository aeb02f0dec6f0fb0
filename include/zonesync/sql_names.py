"""The names zonesync puts into SQL, Kafka topics and the environment, checked one way.

Every pattern is matched whole (`re.fullmatch`): a `^...$` pattern used with `match`
lets a trailing newline through (`$` matches before a final "\\n"), and a name carrying
one would reach SQL text or a topic name. Every backticked identifier zonesync writes
goes through `quote`, which refuses anything but a plain name, so no caller has to
escape a backtick.
"""

from __future__ import annotations

import re

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a table, column or database name
ZONE_NAME = re.compile(r"[a-z][a-z0-9_]{0,15}")  # a zone (zonesync's own names)


def is_ident(name: object) -> bool:
    """Whether `name` is a plain SQL name: ASCII letters, digits, _ (not first), ≤64."""
    return isinstance(name, str) and IDENT.fullmatch(name) is not None


def is_zone_name(name: object) -> bool:
    """Whether `name` is a zone name: lower-case letters, digits, _, a letter first, ≤16."""
    return isinstance(name, str) and ZONE_NAME.fullmatch(name) is not None


def quote(name: str, error: type[Exception] = ValueError) -> str:
    """`name` in backticks, or `error` when it is not a plain SQL name."""
    if not is_ident(name):
        raise error(f"identifier {name!r} is not a plain SQL name")
    return f"`{name}`"
