"""Binlog retention (Pegasus's delay GC): purge only what no consumer can need again.

A binlog file may go only when every consumer has confirmed past it. For each
target zone and partition, the file still needed is the one of the newest
checkpoint from which that partition's next unapplied event would be re-read
(the same rule a resend uses). The oldest such file over all targets and
partitions, and the replicator's own checkpoint, bound the purge. A zone whose
applier never reported holds everything: it may still need it all. A running online
full copy holds its start positions too (meta `copies.start_json`): its target's
appliers replay from there, and until they report the moved-back positions their last
report still shows where they stood before the copy (docs/copy.md).

By age (seed 002's `atrxdc -cl "2020/10/03 16:30:00"` / `-cl 1 day ago`): only files
that are both older than a cutoff and safe by the rule above go; the old-enough
files a consumer still needs stay and are reported, each with who needs it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field

from zonesync.capture.checkpoints import CheckpointStore
from zonesync.events import file_number
from zonesync.meta.db import MetaConfig
from zonesync.runtime.endpoints import Endpoint

# The binlog reader that asks when each file was closed registers under a server_id of its
# own: MariaDB drops the older of two dump connections with the same id, and replicators
# use 4000 + zone id (+ k * 100 after a clash). Far above both, below 2**32.
AGE_READER_SERVER_ID = 0x7A5E0000

BEFORE_FORMS = "'YYYY-MM-DD HH:MM:SS', 'YYYY-MM-DD HH:MM' or 'YYYY-MM-DD', in UTC, not in the future"
OLDER_THAN_FORMS = "a whole number of days, hours or minutes, e.g. 1d, 12h, 30m"
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


class AgeError(ValueError):
    """A --before or --older-than value the command cannot read: names the option and the
    forms it takes."""


def needed_file(meta: MetaConfig, zone: str) -> tuple[str | None, str]:
    cp, reason = needed_checkpoint(meta, zone)
    return (None if cp is None else cp.log_file), reason


def needed_checkpoint(meta: MetaConfig, zone: str):
    """(the oldest checkpoint some consumer may still re-read from, why), or (None, why not).
    Only the checkpoints of the zone's primary now (its newest segment, segments.py): a
    consumer that needs one of a former primary's holds everything."""
    store = CheckpointStore(meta, zone)
    try:
        history = store.history()
    finally:
        store.close()
    if not history:
        return None, f"zone {zone} has no replicator checkpoint yet: nothing may be purged"
    history = [cp for cp in history if cp.segment == history[-1].segment]
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT name FROM zones WHERE name <> %s", (zone,))
            targets = [r[0] for r in cur.fetchall()]
            cur.execute("SELECT target_zone, partition_no, applied_lsn FROM apply_lag WHERE source_zone = %s", (zone,))
            applied: dict[tuple[str, int], int] = {(t, int(p)): int(lsn) for t, p, lsn in cur.fetchall()}
            cur.execute("SELECT run_id, target_zone, start_json FROM copies WHERE status = 'running' "
                        "AND start_json IS NOT NULL")  # fmt: skip
            copies = cur.fetchall()
    finally:
        conn.close()
    partitions = {p for cp in history for p in cp.partition_lsns} | {p for _, p in applied}
    needs = [(f"zone {t} partition {p}", p, applied.get((t, p), 0)) for t in targets for p in sorted(partitions) or [0]]
    for run_id, target, start in copies:
        for p, (lsn, _offset) in json.loads(start).get(zone, {}).items():
            needs.append((f"the copy {run_id} into {target}, partition {p}", int(p), int(lsn)))
    oldest = history[-1]
    holder = "the replicator's own checkpoint"
    for who, p, have in needs:
        candidates = [cp for cp in history if cp.partition_lsns.get(p, 0) <= have]
        if not candidates:
            return None, f"{who} needs LSN {have}, older than every checkpoint"
        need = candidates[-1]
        if (file_number(need.log_file), need.log_pos) < (file_number(oldest.log_file), oldest.log_pos):
            oldest, holder = need, f"{who} (applied LSN {have})"
    return oldest, f"oldest file still needed: {oldest.log_file}, held by {holder}"


def safe_purge_replica(meta: MetaConfig, zone: str, replica_conn, dry_run: bool = False) -> tuple[str | None, str]:
    """Seed S001-10 (the secondary must keep the log too: it may be promoted one day): purge
    a zone replica's binlogs before the file holding the oldest needed checkpoint's GTID
    position there (gtid.py), so that capture can go on from it after a promotion.
    Returns (file or None, why)."""
    from zonesync.capture import gtid

    cp, reason = needed_checkpoint(meta, zone)
    if cp is None:
        return None, reason
    if cp.gtid_pos is None:
        return None, f"the oldest needed checkpoint ({cp.log_file}:{cp.log_pos}) has no GTID position: nothing purged"
    try:
        keep, _pos = gtid.locate(replica_conn, gtid.parse(cp.gtid_pos), where="the replica")
    except gtid.GtidError as exc:
        return None, f"nothing purged: {exc}"
    reason = f"oldest file still needed there: {keep} (GTID {cp.gtid_pos}; on the primary, {reason})"
    with replica_conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        if not files or files[0] == keep:
            return None, f"nothing to purge: {reason}"
        if not dry_run:
            cur.execute(f"PURGE BINARY LOGS TO '{keep}'")
    return keep, reason


def safe_purge(
    meta: MetaConfig,
    zone: str,
    dry_run: bool = False,
    source_conn=None,
    to_file: str | None = None,
    source: Endpoint | None = None,
) -> tuple[str | None, str]:
    """Purge the zone's binlogs before the oldest needed file, or before `to_file` when the
    operator names one that is no later; return (file or None, why). Naming a later file
    (one whose purge would take a still-needed file with it) is refused. The zone's
    database is `source_conn`, else `source` (connected to only when there is a purge)."""
    keep, reason = needed_file(meta, zone)
    if keep is not None and to_file is not None:
        if file_number(to_file) > file_number(keep):
            return None, f"refused: purging before {to_file} would remove {keep}, still needed ({reason})"
        keep, reason = to_file, f"as asked; {reason}"
    if keep is None or dry_run:
        return (keep if dry_run else None), reason
    if source_conn is None:
        source_conn = _connect_source(zone, source)
    with source_conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        if keep not in files:
            return None, f"{keep} is needed but no longer on the server: consumers need a full copy"
        if files and files[0] == keep:
            return None, f"nothing to purge: {reason}"
        cur.execute(f"PURGE BINARY LOGS TO '{keep}'")
        cur.execute("SHOW BINARY LOGS")
        kept = [r[0] for r in cur.fetchall()]
    if kept and kept[0] != keep:  # the server keeps files its crash recovery or a reading replica needs
        reason += f"; the server kept {kept[0]} and later (its own crash recovery or a replica still reads them)"
    return keep, reason


def _connect_source(zone: str, source: Endpoint | None):
    """The caller says where the zone's database is: capture does not look it up."""
    if source is None:
        raise ValueError(f"zone {zone}: give the zone's database (source_conn or source) to purge its binlogs")
    return source.connect(database="")


def cutoff(before: str | None = None, older_than: str | None = None, now: dt.datetime | None = None) -> dt.datetime:
    """The age limit as a naive UTC datetime, from `--before` (a UTC time) or `--older-than`
    (a span back from now); AgeError names the option and the forms it takes."""
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    if (before is None) == (older_than is None):
        raise AgeError("give exactly one of --before and --older-than")
    if before is not None:
        text = before.strip()
        for form in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
            try:
                when = dt.datetime.strptime(text, form)
            except ValueError:
                continue
            if when > now:
                raise AgeError(f"--before {before!r} is in the future (now {now:%Y-%m-%d %H:%M:%S} UTC)")
            return when
        raise AgeError(f"--before {before!r} is not a time: give {BEFORE_FORMS}")
    m = re.fullmatch(r"\s*(\d+)\s*([dhm])\s*", older_than)
    if not m or int(m.group(1)) == 0:
        raise AgeError(f"--older-than {older_than!r} is not an age: give {OLDER_THAN_FORMS}")
    return now - dt.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


def closed_at(
    source_conn, files: list[str], server_id: int = AGE_READER_SERVER_ID, until: dt.datetime | None = None
) -> dict[str, dt.datetime | None]:
    """When each file but the last was closed (naive UTC), or None where the server does not say;
    with `until`, only up to the first file not closed before it (the later ones closed later).

    A file's age is the time of its last event; no statement reports it (SHOW BINLOG EVENTS
    lists no times, SHOW BINARY LOGS only sizes), and finding the last event means reading
    the whole file. The next file's first event does the job with one short read: the
    Format_description event the server writes at the head of every file carries the time
    it opened that file, which is when it closed the one before. Nothing in a file is newer
    than that, so a file closed before the cutoff holds only older events (it may look a
    little younger than its last event: never older, so age never purges a file early).
    The server sends it over the replication protocol (COM_BINLOG_DUMP from position 4 of
    the next file, as the replicator reads), with the privileges the replicator has; the
    file's modification time would need the server's file system. The last file is the one
    being written: it has no close time and is never old enough.
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import FormatDescriptionEvent

    password = source_conn.password
    settings = {
        "host": source_conn.host,
        "port": source_conn.port,
        "user": source_conn.user.decode() if isinstance(source_conn.user, bytes) else source_conn.user,
        "passwd": password.decode() if isinstance(password, bytes) else password or "",
    }
    out: dict[str, dt.datetime | None] = {}
    for older, newer in zip(files, files[1:], strict=False):
        stream = BinLogStreamReader(
            connection_settings=settings,
            server_id=server_id,
            log_file=newer,
            log_pos=4,
            resume_stream=True,
            blocking=False,
            only_events=[FormatDescriptionEvent],
        )
        try:
            event = stream.fetchone()
        finally:
            stream.close()
        # a zero timestamp is an artificial event (not the file's own): no time known
        stamp = event.timestamp if event is not None and stream.log_file == newer else 0
        out[older] = dt.datetime.fromtimestamp(stamp, dt.UTC).replace(tzinfo=None) if stamp else None
        if until is not None and (out[older] is None or out[older] >= until):
            break
    return out


@dataclass
class AgePurge:
    """What an age purge did (or, dry, would do)."""

    cutoff: dt.datetime
    purged: list[str] = field(default_factory=list)  # the files removed (or, dry, to remove)
    kept: list[tuple[str, dt.datetime, str]] = field(default_factory=list)  # old enough, still needed: why
    note: str = ""  # anything else the operator should read (nothing old enough, the server kept more)


def purge_older(
    meta: MetaConfig,
    zone: str,
    before: dt.datetime,
    dry_run: bool = False,
    source_conn=None,
    server_id: int = AGE_READER_SERVER_ID,
    source: Endpoint | None = None,
) -> AgePurge:
    """Purge the zone's binlog files closed before `before` (naive UTC) that no consumer
    needs (the rule of `needed_file`); report the old-enough files that stay because a
    consumer still needs them. A purge removes a prefix of the files: it stops at the
    first file that is too young or still needed, whichever comes first."""
    keep, reason = needed_file(meta, zone)
    result = AgePurge(before)
    if source_conn is None:
        source_conn = _connect_source(zone, source)
    with source_conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
    closed = closed_at(source_conn, files, server_id, until=before)
    old: list[str] = []
    for f in files[:-1]:
        if closed.get(f) is None or closed[f] >= before:
            break
        old.append(f)
    if not old:
        result.note = f"no binlog file of zone {zone} was closed before {before:%Y-%m-%d %H:%M:%S} UTC"
        return result
    if keep is None:
        safe = 0
    elif keep in files:
        safe = files.index(keep)
    elif files and file_number(keep) < file_number(files[0]):
        result.note = f"{keep} is needed but no longer on the server: consumers need a full copy"
        safe = 0
    else:
        safe = len(files) - 1
    n = min(len(old), safe)
    for f in old[n:]:  # old enough, yet kept: the first is the file still needed, the rest follow it
        if keep in files:
            why = reason if f == keep else f"the purge stops at {keep}: {reason}"
        else:
            why = result.note or reason
        result.kept.append((f, closed[f], why))
    if n == 0:
        return result
    result.purged = files[:n]
    if dry_run:
        return result
    with source_conn.cursor() as cur:
        cur.execute(f"PURGE BINARY LOGS TO '{files[n]}'")
        cur.execute("SHOW BINARY LOGS")
        left = {r[0] for r in cur.fetchall()}
    result.purged = [f for f in files[:n] if f not in left]
    if len(result.purged) < n:  # the server keeps files its crash recovery or a reading replica needs
        result.note = (
            f"the server kept {files[len(result.purged)]} and later (its own crash recovery or a replica still "
            "reads them)"
        )
    return result
