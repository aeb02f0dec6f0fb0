"""DDL in a zone's binlog: which table a statement changes.

zonesync does not replicate DDL (a schema change goes to every zone through the
schema_change DAG, docs/schema-changes.md). The replicator still reads each one on
the replicated schemas: it forgets what it knew of the table (its primary key) and
records the statement in meta (meta/schema_changes.py), so that an applier holding
the table for disagreeing definitions can name the statement behind it.

Only the statement's head is read: the verb, the object and its (possibly
qualified, possibly quoted) name. What is not a table's DDL gives None.
"""

from __future__ import annotations

import re

_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QUALIFIED = rf"({_NAME}(?:\s*\.\s*{_NAME})?)"
_COMMENTS = r"(?:\s|/\*.*?\*/|#[^\n]*\n|--\s[^\n]*\n)*"
_HEADS = [
    r"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE",
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE",
    r"DROP\s+(?:TEMPORARY\s+)?TABLE",
    r"RENAME\s+TABLES?",
    r"TRUNCATE(?:\s+TABLE)?",
    rf"(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+|OFFLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX"
    rf"\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}\s+ON",
]
_TABLE_DDL = re.compile(
    rf"^{_COMMENTS}(?:{'|'.join(_HEADS)})\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(?:/\*.*?\*/\s*)?{_QUALIFIED}",
    re.IGNORECASE | re.DOTALL,
)


def _unquote(name: str) -> str:
    name = name.strip()
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def table_changed(statement: str, default_schema: str) -> tuple[str, str] | None:
    """(schema, table) of the table a DDL statement changes (the first one it names), or
    None when the statement is not a table's DDL. An unqualified name is in
    `default_schema` (the session's database when the statement ran)."""
    found = _TABLE_DDL.match(statement)
    if found is None:
        return None
    parts = re.findall(_NAME, found.group(1))
    if len(parts) == 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return default_schema, _unquote(parts[0])


def retarget(statement: str, qualified_name: str) -> str:
    """The statement with the table it changes replaced by `qualified_name` (already
    quoted as needed): a DDL tried on a scratch copy (schema/steps.py)."""
    found = _TABLE_DDL.match(statement)
    if found is None:
        raise ValueError("not a table's DDL")
    start, end = found.span(1)
    return f"{statement[:start]}{qualified_name}{statement[end:]}"
