"""Manual row locks (seed 000 数据锁定: 除了手动触发的…): an operator locks a row, and
resolving a lock releases the events it held.

A manual lock is a row of `zonesync.row_locks` like the ones the applier writes on a
mismatch (bookkeeping/row_locks.py): the applier sees it the same way, skips every later change of the
row and counts it as held, `zonesync locks list` shows it. What the applier cannot know
is where holding started, so `add` records it: in one transaction with the lock row, it
locks the apply_state rows of the row's partition in every source zone (the applier
claims them first in each of its transactions, so no batch is half-way) and writes
their applied LSN and Kafka offset into the lock's `first_event` document
(`{"manual": true, "held_from": {source: {"partition", "lsn", "offset"}}}`). Every
change of the row applied after that point was held.

`resolve` of a manual lock, in one transaction: lock the same apply_state rows (the
applier waits), read how far each partition got, fetch that span of each partition
from Kafka, keep the row's events, check the span is whole (each event's prev_lsn is the
one before: the applier's continuity rule), delete the lock, and apply the row's events
in order with the applier's own writer (merged, version-guarded, old-row-checked).
Events already in the target are skipped by version (a row repaired by hand to the
source's version); a held change whose old row still differs locks the row again, as
the applier would. The applier's next batch for that partition sees no lock and an
up-to-date row. If the span is no longer all in the broker, nothing changes: repair the
row by hand and resolve with `drop_held`.

Automatic locks record only the event that locked the row, not where the later held
events start: resolving one drops its held events, as before (repair the row from the
source first). With table weights, a lower weight level (applied without claiming the
partition) that runs while a resolve commits may skip one more change of the row; the
row's next change then fails its old-row check and locks it again, with an alert.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pymysql

from zonesync import events
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.errors import TableMissing
from zonesync.apply.tools.owner_row import put_row
from zonesync.events import ChangeEvent, EventError, decode_message, decode_row, encode_row, pk_text
from zonesync.sql_names import is_ident, quote

PK_FORMS = "a JSON list of the key values, e.g. '[42]', or an object by column, e.g. '{\"tenant_id\": 42}'"


class LockError(ValueError):
    """A --table or --pk the command cannot use: names the field."""


class HeldEventsLost(RuntimeError):
    """The events a manual lock held are no longer all in the broker: nothing was resolved."""


class _LockChanged(RuntimeError):
    """The lock was resolved or replaced between the first look and its row lock: look again."""


@dataclass
class Resolved:
    found: bool
    manual: bool = False
    released: dict[str, int] = field(default_factory=dict)  # source zone -> events of the row released
    applied: int = 0  # of them, applied
    skipped: int = 0  # skipped by version (already in the target)
    relocked: list[str] = field(default_factory=list)  # reasons, when a released change locked the row again
    taken_from: str | None = None  # an automatic lock: the source zone whose current row was taken
    source_row_gone: bool = False  # ... where the row no longer exists (deleted here too)


def key_text(writer: ZoneWriter, table: str, pk: str) -> str:
    """The row's key as the applier keys it (pk_text of its encoded key values), from --table
    and --pk. A list gives the key values in the order `zonesync locks list` prints them
    (the key columns sorted by name: for a one-column key, just that value). The target's
    row, when there, supplies the values as the applier encodes them (a date, a decimal)."""
    if not is_ident(table):
        raise LockError(f"--table {table!r} is not a table name")
    try:
        columns = writer.primary_key(table)
    except TableMissing:
        raise LockError(
            f"--table {table}: no such table with a primary key in zone database {writer.database}"
        ) from None
    names = sorted(columns)
    expected = f"[{', '.join(names)}]"
    try:
        given = json.loads(pk)
    except (TypeError, ValueError):
        raise LockError(f"--pk {pk!r} is not JSON: give {PK_FORMS}") from None
    if isinstance(given, dict):
        if set(given) != set(columns):
            raise LockError(f"--pk {pk}: table {table}'s primary key is {expected}: name exactly those columns")
        values = dict(given)
    elif isinstance(given, list):
        if len(given) != len(names):
            raise LockError(f"--pk {pk}: table {table}'s primary key is {expected}: give {len(names)} value(s)")
        values = dict(zip(names, given, strict=True))
    else:
        raise LockError(f"--pk {pk}: give {PK_FORMS} (table {table}'s primary key is {expected})")
    if any(v is None or isinstance(v, dict | list) for v in values.values()):
        raise LockError(f"--pk {pk}: key values are numbers or strings (table {table}'s primary key is {expected})")
    conn = writer.connect()
    with conn.cursor() as cur:
        cols = ", ".join(quote(c, LockError) for c in columns)
        cond = " AND ".join(f"{quote(c, LockError)} = %s" for c in columns)
        cur.execute(f"SELECT {cols} FROM {quote(table, LockError)} WHERE {cond}", [values[c] for c in columns])
        row = cur.fetchone()
    conn.commit()
    if row is not None:
        values = encode_row(dict(zip(columns, row, strict=True)))
    return pk_text(values)


def add(
    writer: ZoneWriter,
    table: str,
    pk: str,
    reason: str,
    sources: list[str],
    partitions: int,
) -> tuple[bool, str]:
    """Lock the row; (True, its key text) or (False, why not: locked already)."""

    text = key_text(writer, table, pk)
    part = events.partition_of(table, text, partitions)
    keys = [(s, part) for s in sorted(sources)]
    writer.ensure_positions(keys)

    def attempt(conn) -> tuple[bool, str]:
        with conn.cursor() as cur:
            held_from = _claim(cur, keys)
            doc = {"manual": True, "held_from": {s: {"partition": part, **pos} for s, pos in held_from.items()}}
            added = cur.execute(
                "INSERT IGNORE INTO zonesync.row_locks (table_name, pk, reason, first_event, held_events) "
                "VALUES (%s, %s, %s, %s, 0)",
                (table, text, f"manual lock: {reason}"[:500], json.dumps(doc, separators=(",", ":"))),
            )
            if not added:
                cur.execute("SELECT reason FROM zonesync.row_locks WHERE table_name = %s AND pk = %s", (table, text))
                (why,) = cur.fetchone()
        conn.commit()
        return (True, text) if added else (False, f"{table} {text} is locked already: {why}")

    return _retried(writer, attempt)


def resolve(
    writer: ZoneWriter,
    table: str,
    pk: str,
    topic_of,
    bootstrap,
    drop_held: bool = False,
    timeout: float = 10.0,
    source_row=None,
) -> Resolved:
    """Remove the row's lock; for a manual lock, apply the events it held (see above). An
    automatic lock (a change met a row it did not expect) takes, with `source_row(zone,
    table, pk) -> row or None`, the current row of the zone whose change locked it (seed
    S003-31, Otter's 反查数据库: re-query the source by primary key): that row, with its
    version and origin, replaces the locked one in the same transaction as the unlock,
    on the applier's session (never published again), or the row is deleted when the
    source no longer has it. The held changes are older than that row: they are dropped."""
    text = key_text(writer, table, pk)
    done = _retried(
        writer,
        lambda conn: _resolve(writer, conn, table, text, topic_of, bootstrap, drop_held, timeout, source_row),
        also=_LockChanged,
    )
    if done is None:
        raise _LockChanged(f"the lock of {table} {text} kept changing while it was being resolved")
    return done


def _retried(writer: ZoneWriter, attempt, also: type[Exception] | tuple = ()):
    """`attempt(conn)` on a fresh connection of the writer, rolled back on any failure and
    tried again after a lock wait timeout or a deadlock (and after `also`), 7 times at
    most; the last deadlock is raised, None after the last `also`."""
    for n in range(7):
        conn = writer.connect()
        try:
            return attempt(conn)
        except also:
            _rollback(writer)
        except pymysql.err.OperationalError as exc:
            _rollback(writer)
            if exc.args[0] not in (1205, 1213) or n == 6:
                raise
        except BaseException:
            _rollback(writer)
            raise
    return None


def _resolve(writer, conn, table, text, topic_of, bootstrap, drop_held, timeout, source_row=None) -> Resolved:
    with conn.cursor() as cur:
        cur.execute("SELECT first_event FROM zonesync.row_locks WHERE table_name = %s AND pk = %s", (table, text))
        row = cur.fetchone()
        if row is None:
            conn.commit()
            return Resolved(False)
        held_from = _held_from(row[0])
        keys = sorted((s, int(p["partition"])) for s, p in held_from.items())
        now = _claim(cur, keys) if keys and not drop_held else {}
        cur.execute(
            "SELECT first_event FROM zonesync.row_locks WHERE table_name = %s AND pk = %s FOR UPDATE", (table, text)
        )
        again = cur.fetchone()
        if again is None or again[0] != row[0]:  # resolved (and maybe locked anew) meanwhile
            raise _LockChanged(f"the lock of {table} {text} changed while it was being resolved")
        changes: list[tuple[str, list[ChangeEvent]]] = []
        for source, start in sorted(held_from.items()):
            if source not in now or now[source]["lsn"] <= start["lsn"]:
                continue
            events = _held_events(topic_of(source), int(start["partition"]), start, now[source], bootstrap, timeout)
            mine = [e for e in events if e.table == table and e.key()[1] == text]
            if mine:
                changes.append((source, mine))
        cur.execute("DELETE FROM zonesync.row_locks WHERE table_name = %s AND pk = %s", (table, text))
        taken = _take_source_row(cur, table, row[0], source_row) if not held_from and source_row else None
    result = Resolved(True, manual=bool(held_from), released={s: len(evs) for s, evs in changes})
    if taken is not None:
        result.taken_from, result.source_row_gone = taken
    if not changes:
        conn.commit()
        return result
    done = writer._apply(conn, changes, [], read_first=True)  # commits; no position: the applier's stays
    result.applied, result.skipped = done.applied, done.skipped
    result.relocked = [reason for _, _, _, reason in done.locked]
    return result


def _take_source_row(cur, table: str, first_event: str, source_row) -> tuple[str, bool]:
    """The locking change's source zone's current row in place of the locked one (see
    resolve): (that zone, whether the row is gone there)."""
    event = json.loads(first_event)
    source, key = event["source_zone"], decode_row(event["pk"])
    current = source_row(source, table, key)
    put_row(cur, table, key, current)
    return source, current is None


def _held_from(first_event: str) -> dict[str, dict]:
    """Where a manual lock started holding, per source zone; {} for an automatic lock."""
    try:
        doc = json.loads(first_event)
    except ValueError:
        return {}
    if not isinstance(doc, dict) or doc.get("manual") is not True:
        return {}
    return dict(doc.get("held_from") or {})


def _claim(cur, keys: list[tuple[str, int]]) -> dict[str, dict]:
    """Lock the apply_state rows (source zone, partition) and say where each stands."""
    cond = " OR ".join(["(source_zone = %s AND partition_no = %s)"] * len(keys))
    cur.execute(
        f"SELECT source_zone, applied_lsn, kafka_offset FROM zonesync.apply_state WHERE {cond} "
        "ORDER BY source_zone, partition_no FOR UPDATE",
        [v for key in keys for v in key],
    )
    return {s: {"lsn": int(lsn), "offset": int(off)} for s, lsn, off in cur.fetchall()}


def _held_events(topic: str, partition: int, start: dict, end: dict, bootstrap, timeout: float) -> list[ChangeEvent]:
    """The partition's events after LSN start["lsn"] up to end["lsn"], in order: read from
    the Kafka offset after start["offset"] up to end["offset"] (the broker may have
    restarted empty since, renumbering offsets: then from its first message); raises
    HeldEventsLost unless they form the whole chain between the two LSNs."""
    first = start["offset"] + 1
    events = _read(topic, partition, first, end["offset"], bootstrap, timeout)
    chain = _chain(events, start["lsn"], end["lsn"])
    if chain is None and first > 0:
        chain = _chain(_read(topic, partition, 0, None, bootstrap, timeout), start["lsn"], end["lsn"])
    if chain is None:
        raise HeldEventsLost(
            f"the events held since the lock ({topic} partition {partition}, LSNs after {start['lsn']} up to "
            f"{end['lsn']}) are no longer all in the broker: nothing resolved. Repair the row from its owner "
            "zone, then resolve with --drop-held"
        )
    return chain


def _chain(events: list[ChangeEvent], after: int, upto: int) -> list[ChangeEvent] | None:
    span = sorted({e.lsn: e for e in events if after < e.lsn <= upto}.values(), key=lambda e: e.lsn)
    if not span or span[0].prev_lsn != after or span[-1].lsn != upto:
        return None
    if any(b.prev_lsn != a.lsn for a, b in zip(span, span[1:], strict=False)):
        return None
    return span


def _read(topic: str, partition: int, first: int, last: int | None, bootstrap, timeout: float) -> list[ChangeEvent]:
    """Messages `first` .. `last` (None: up to the end) of one partition, decoded."""
    from confluent_kafka import Consumer, TopicPartition

    from zonesync.runtime import transport

    consumer = Consumer(transport.consumer_config(bootstrap(), "zonesync-locks"))
    try:
        tp = TopicPartition(topic, partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
        first = max(first, low)
        last = high - 1 if last is None else min(last, high - 1)
        if last < first:
            return []
        consumer.assign([TopicPartition(topic, partition, first)])
        events: list[ChangeEvent] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            try:
                events += decode_message(msg.value())
            except EventError:
                pass  # the applier halts on it; here it only leaves a hole the chain check sees
            if msg.offset() >= last:
                return events
        return events  # short: the chain check says what is missing
    finally:
        consumer.close()


def _rollback(writer: ZoneWriter) -> None:
    try:
        writer.connect().rollback()
    except pymysql.err.Error:
        writer.close()
