"""The applier's SQL: identifiers, multi-row statements, and requests of several statements.

Statements are built as text with the connection's literals (literals.py) and sent
several to a request (the applier's connection allows multi-statements): a round
trip per request, not per statement.
"""

from __future__ import annotations

import re

import pymysql

from zonesync.apply.batch.literals import row_tuples
from zonesync.apply.errors import ApplyError

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def q(name: str) -> str:
    if not IDENT.match(name):
        raise ApplyError(f"identifier {name!r} is not a plain SQL name")
    return f"`{name}`"


def result_sets(cur, statements: list[str]):
    """Run statements as one request; yields each one's rows in order (the cursor's
    description is that result set's while its rows are being handled). Consume it whole:
    unread result sets would block the connection's next request."""
    cur.execute(";\n".join(statements))
    for n in range(len(statements)):
        if n:
            cur.nextset()
        yield cur.fetchall()


def send(cur, statements: list[str]) -> None:
    """Run statements as one request (the connection allows multi-statements); an
    error in any of them is raised here, and the caller rolls the transaction back."""
    if not statements:
        return
    cur.execute(";\n".join(statements))
    while cur.nextset():
        pass
    statements.clear()


def send_numbered(cur, statements: list[str]) -> None:
    """send(), and an error names the statement that failed: `error.statement` is its
    index (the server runs a request's statements in order and stops at the first error)."""
    done = 0
    try:
        cur.execute(";\n".join(statements))
        done = 1
        while cur.nextset():
            done += 1
    except pymysql.err.Error as exc:
        exc.statement = done
        raise
    statements.clear()


def upserts(lit, table: str, rows: list[dict]) -> list[str]:
    """Multi-row upserts carrying the event's _zs_origin and _zs_version; one per
    column set (rows of one table normally share it) and 500 rows."""
    return multi_row(lit, table, rows, upsert=True)


def inserts(lit, table: str, rows: list[dict]) -> list[str]:
    """Multi-row plain INSERTs of new rows: any existing key fails the statement."""
    return multi_row(lit, table, rows, upsert=False)


def multi_row(lit, table: str, rows: list[dict], upsert: bool) -> list[str]:
    groups: dict[tuple[str, ...], list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    out = []
    for cols, group in groups.items():
        col_sql = ", ".join(q(c) for c in cols)
        tail = ""
        if upsert:
            tail = " ON DUPLICATE KEY UPDATE " + ", ".join(f"{q(c)} = VALUES({q(c)})" for c in cols)
        for start in range(0, len(group), 500):
            # a group's rows have their columns in the order of `cols` (that is the group's key)
            values = row_tuples(group[start : start + 500], lit)
            out.append(f"INSERT INTO {q(table)} ({col_sql}) VALUES {values}{tail}")
    return out


def key_condition(lit, pk_cols: list[str], keys: list[tuple]) -> str:
    """WHERE condition matching these primary keys (an IN list for a one-column key)."""
    if len(pk_cols) == 1:
        return f"{q(pk_cols[0])} IN ({', '.join([lit(k[0]) for k in keys])})"
    return " OR ".join(
        "(" + " AND ".join(f"{q(c)} = {lit(v)}" for c, v in zip(pk_cols, k, strict=True)) + ")" for k in keys
    )
