"""meta's schema_changes: the DDL each zone's replicator read on the replicated schemas
(capture/ddl.py). An applier that holds a table for disagreeing definitions names the
newest statement on it; `zonesync schema log` lists them."""

from __future__ import annotations

from typing import NamedTuple

MAX_STATEMENT = 4000  # kept of a statement (TEXT holds more; an alert needs less)


class SchemaChange(NamedTuple):
    zone: str
    log_file: str
    log_pos: int
    schema: str
    table: str | None
    statement: str
    executed_at: object  # datetime (UTC)


def record(meta, change: SchemaChange) -> None:
    """Once per binlog position: a pass that reads the binlog again adds nothing."""
    meta.run(
        "INSERT IGNORE INTO schema_changes (zone, log_file, log_pos, schema_name, table_name, statement, "
        "executed_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (change.zone, change.log_file, change.log_pos, change.schema, change.table,
         change.statement[:MAX_STATEMENT], change.executed_at),
    )  # fmt: skip


_COLUMNS = "zone, log_file, log_pos, schema_name, table_name, statement, executed_at"


def latest(meta, table: str) -> SchemaChange | None:
    """The newest statement recorded on `table`, in any zone."""
    rows, _ = meta.run(
        f"SELECT {_COLUMNS} FROM schema_changes WHERE table_name = %s ORDER BY executed_at DESC, id DESC LIMIT 1",
        (table,),
    )
    return SchemaChange(*rows[0]) if rows else None


def recent(meta, table: str | None = None, limit: int = 50) -> list[SchemaChange]:
    """The newest statements first, of one table or of all."""
    where, args = ("WHERE table_name = %s", (table, limit)) if table else ("", (limit,))
    rows, _ = meta.run(f"SELECT {_COLUMNS} FROM schema_changes {where} ORDER BY id DESC LIMIT %s", args)
    return [SchemaChange(*row) for row in rows]


def describe(change: SchemaChange) -> str:
    """One line: where and when, and the statement."""
    statement = " ".join(change.statement.split())
    if len(statement) > 300:
        statement = statement[:297] + "..."
    return f"zone {change.zone} ran `{statement}` at {change.executed_at:%Y-%m-%d %H:%M:%S} UTC"
