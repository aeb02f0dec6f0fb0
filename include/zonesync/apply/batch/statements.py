"""The applier's SQL: identifiers, multi-row statements, and requests of several statements.

Statements are built as text with the connection's literals (literals.py) and sent
several to a request (the applier's connection allows multi-statements): a round
trip per request, not per statement.
"""

from __future__ import annotations

import pymysql

from zonesync.apply.batch.literals import row_tuples
from zonesync.apply.errors import ApplyError
from zonesync.sql_names import quote


def q(name: str) -> str:
    return quote(name, ApplyError)


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


VERSION = "_zs_version"


def upserts(lit, table: str, rows: list[dict], guarded_by: list[str] | None = None) -> list[str]:
    """Multi-row upserts carrying the event's _zs_origin and _zs_version; one per
    column set (rows of one table normally share it) and 500 rows. With `guarded_by`
    (the primary key's columns: copy mode), each row lands only where it is newer than
    the row it meets (guarded_update)."""
    return multi_row(lit, table, rows, upsert=True, guarded_by=guarded_by)


def inserts(lit, table: str, rows: list[dict]) -> list[str]:
    """Multi-row plain INSERTs of new rows: any existing key fails the statement."""
    return multi_row(lit, table, rows, upsert=False)


def guarded_update(table: str, cols: tuple[str, ...], pk_cols: list[str]) -> str:
    """Copy mode's ON DUPLICATE KEY UPDATE: a row meeting an existing one replaces its
    columns only when its _zs_version is greater, and the version never goes back. The
    copy writes the same keys on other connections, and a key the applier's read found
    absent is not locked by it, so the statement itself must keep the newer row.

    _zs_version is assigned last: MySQL evaluates the assignments left to right, and an
    expression after `_zs_version = ...` would see the new version, not the row's. The
    key columns are not assigned (the row met is the one with this key)."""
    if VERSION not in cols:
        raise ApplyError(f"copy mode needs the {VERSION} column in every row of {table}")
    version = q(VERSION)
    newer = f"VALUES({version}) > {version}"
    sets = [f"{q(c)} = IF({newer}, VALUES({q(c)}), {q(c)})" for c in cols if c != VERSION and c not in pk_cols]
    sets.append(f"{version} = GREATEST({version}, VALUES({version}))")
    return " ON DUPLICATE KEY UPDATE " + ", ".join(sets)


def guarded_deletes(lit, table: str, pk_cols: list[str], keys: list[tuple], versions: list[int]) -> list[str]:
    """Copy mode's deletes: each key's row goes only while it is older than its delete
    (`_zs_version` below the delete's version), so a newer row the copy wrote meanwhile
    stays. By primary key (FORCE INDEX), 500 keys a statement."""
    out = []
    for start in range(0, len(keys), 500):
        cond = " OR ".join(
            "("
            + " AND ".join(f"{q(c)} = {lit(v)}" for c, v in zip(pk_cols, key, strict=True))
            + f" AND {q(VERSION)} < {int(version)})"
            for key, version in zip(keys[start : start + 500], versions[start : start + 500], strict=True)
        )
        out.append(f"DELETE {q(table)} FROM {q(table)} FORCE INDEX (PRIMARY) WHERE {cond}")
    return out


def multi_row(lit, table: str, rows: list[dict], upsert: bool, guarded_by: list[str] | None = None) -> list[str]:
    groups: dict[tuple[str, ...], list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    out = []
    for cols, group in groups.items():
        col_sql = ", ".join(q(c) for c in cols)
        tail = ""
        if upsert and guarded_by is not None:
            tail = guarded_update(table, cols, guarded_by)
        elif upsert:
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
