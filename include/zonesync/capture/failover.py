"""A zone's primary replaced by its replica: capture goes on there (seeds S001-10, S003-38).

`promote(zone, new server)` maps the zone's capture onto the promoted replica, as Canal
and Otter reconnect to a switched primary by GTID. Phases, each a check that refuses
with one line before anything is written:

1. The new server: capture settings (ROW, FULL images and metadata), log_slave_updates
   (without it the transactions it replicated are not in its binlog), no replication
   thread still running (it must be the primary now), not the zone's primary already
   (a second run is a no-op).
2. The old primary: if it still answers and accepts writes, refuse. Two primaries of a
   zone is the split brain every failover runbook starts by preventing; what it wrote
   after the mapping would never be captured.
3. The position: the newest checkpoint's GTID state located in the new server's binlog
   (gtid.py). Transactions it covers that the new server never received (an asynchronous
   replica that lagged) were possibly sent to the other zones already, but are gone from
   this one: refused unless `allow_lost`, which starts at the new server's binlog end and
   raises an alert naming them (the zone then needs a consistency check). A replica that
   purged the binlog capture needs is refused, always.
4. The chain: the events published after the checkpoint (tail.py) were possibly applied;
   the new segment's chain goes on from the last of them per partition, with counts that
   go on exactly, and its LSNs are above every one of them (segments.py: the file offset).
   Transactions between the checkpoint and the old primary's death are read again on the
   new server and published again under new LSNs: their rows are applied again as the
   versions they were, which the version guard makes no-ops (no duplicate in effect).
5. Fenced: before phases 3 and 4 the promotion takes the zone's replicator lease itself
   and waits out the old holder's (at most its TTL): the holder cannot renew, so it stops
   reading and publishing, and no replicator starts while the promotion runs; the
   checkpoint and the tail it reads are final. One meta transaction then writes the new
   segment and its first checkpoint (keyed at the floor, above every earlier one, so it
   is the newest; refused if a checkpoint was saved meanwhile) and lifts the fence; the
   replicator takes the lease and reads the new primary. A refusal lifts it too.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass

from zonesync.capture import gtid, segments, tail
from zonesync.capture.checkpoints import CheckpointStore
from zonesync.capture.source import SourceDB
from zonesync.config import ConfigError
from zonesync.events import file_number, make_lsn, split_lsn
from zonesync.meta import alerts
from zonesync.meta.db import MetaConfig

log = logging.getLogger("zonesync.failover")
OLD_PRIMARY_TIMEOUT_S = 2
FENCE_S = 600  # the promotion's hold on the replicator lease, should it die holding it
FENCE_MARGIN_S = 1.0  # after the old holder's lease ran out: its last messages delivered


class FailoverRefused(ConfigError):
    """The promotion cannot be done safely now: the message says why and what to do."""


@dataclass(frozen=True)
class Promotion:
    segment: segments.Segment
    already: bool = False  # the server was the zone's primary already: nothing done
    reread_from: tuple[str, int] | None = None  # where capture resumes on it
    tail_events: int = 0  # events published after the old checkpoint, continued from
    lost: str | None = None  # GTIDs given up (allow_lost)


def _new_server_checks(conn, address: str) -> int:
    """Phase 1 (the capture settings are SourceDB.check_capture_settings): its server_id."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.server_id, @@GLOBAL.log_slave_updates")
        server_id, slave_updates = cur.fetchone()
        cur.execute("SHOW ALL SLAVES STATUS")
        names = [d[0] for d in cur.description]
        running = [
            dict(zip(names, r, strict=True)) for r in cur.fetchall()
            if "Yes" in (dict(zip(names, r, strict=True)).get("Slave_SQL_Running"),
                         dict(zip(names, r, strict=True)).get("Slave_IO_Running"))
        ]  # fmt: skip
    if running:
        source = f"{running[0].get('Master_Host')}:{running[0].get('Master_Port')}"
        raise FailoverRefused(f"{address} still replicates from {source}: stop it first (STOP ALL SLAVES; "
                              "RESET SLAVE ALL) so that it is the primary")  # fmt: skip
    if not int(slave_updates):
        raise FailoverRefused(
            f"{address} has log_slave_updates off: what it replicated is not in its binlog, so capture cannot go "
            "on there (set log_slave_updates=ON on every zone replica)"
        )
    return int(server_id)


def _old_primary_writable(old: SourceDB, server_id: int) -> bool:
    """Phase 2: does the zone's former primary still answer, as itself, accepting writes?"""
    try:
        conn = old.endpoint.connect(database="", timeout=OLD_PRIMARY_TIMEOUT_S, read_timeout=OLD_PRIMARY_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - down or unreachable: what a failover is for
        return False
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.server_id, @@GLOBAL.read_only")
            sid, read_only = cur.fetchone()
        return int(sid) == server_id and not int(read_only)
    except Exception:  # noqa: BLE001
        return False
    finally:
        conn.close()


def promote(meta: MetaConfig, zone: str, new: SourceDB, *, by: str, bootstrap: str, topic: str, partitions: int,
            allow_lost: bool = False) -> Promotion:  # fmt: skip
    """Map zone `zone`'s capture onto the server `new` (phases above); FailoverRefused
    changes nothing."""
    address = f"{new.host}:{new.port}"
    current = segments.current(meta, zone)
    conn = new.connect()
    try:
        server_id = _new_server_checks(conn, address)
        if current is not None and current.server_id == server_id and current.address == address:
            return Promotion(current, already=True)
        new.check_capture_settings()
    finally:
        conn.close()
    if current is not None and current.server_id != server_id:
        old = SourceDB(current.host, current.port, new.user, new.password)
        if _old_primary_writable(old, current.server_id):
            raise FailoverRefused(
                f"zone {zone}'s primary {current.address} still answers and accepts writes: set it read_only "
                "(SET GLOBAL read_only = ON) or stop it first; two writable primaries lose writes"
            )
    _position(meta, zone, new, address, allow_lost)  # a refusal at once, before the fence's wait
    fence = _fence(meta, zone)
    try:
        cp, at, state_there, lost = _position(meta, zone, new, address, allow_lost)
        try:
            after = tail.events_after(bootstrap, topic, partitions, dict(cp.partition_lsns))
        except tail.TailUnread as exc:
            raise FailoverRefused(f"the broker must answer to continue zone {zone}'s chains: {exc}") from None
        lsns, counts, top = _continued(cp, after)
        base_file, floor = next_floor(top)
        seg = segments.Segment(zone, (current.segment + 1) if current else 1, new.host, new.port, server_id, at[0],
                               at[1], state_there, base_file - file_number(at[0]), floor, lost)  # fmt: skip
        _record(meta, current, seg, cp, lsns, counts, top, by, fence)
    except BaseException:
        _unfence(meta, zone, fence)
        raise
    detail = {"from": current.address if current else None, "to": address, "segment": seg.segment,
              "resume_at": f"{at[0]}:{at[1]}", "gtid_pos": state_there, "by": by[:128]}  # fmt: skip
    log.warning("zone %s: primary is now %s: %s", zone, address, detail)
    alerts.record(meta, zone, "primary_promoted", detail)
    if lost:
        alerts.record(meta, zone, "failover_lost_transactions", {
            **detail, "lost": lost,
            "action": f"the old primary's transactions {lost} are not in zone {zone} but may be in the others: "
                      f"run zonesync check --zones {zone},<the others> and repair",
        })  # fmt: skip
    return Promotion(seg, reread_from=at, tail_events=sum(n for n, _ in after.values()), lost=lost)


def _fence(meta: MetaConfig, zone: str) -> str:
    """Phase 5's first half: the zone's replicator lease taken by this promotion, so no
    replicator reads while it runs; then the old holder's lease is waited out: by its
    expiry the holder has tried to renew and stopped, its last messages delivered, so the
    checkpoint and the topic's tail read next are final. Returns the fence's holder name."""
    fence = f"failover:{uuid.uuid4().hex[:12]}"
    with meta.transaction() as cur:
        cur.execute(
            "SELECT holder, GREATEST(TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), 0) / 1e6 FROM replicator_leases "
            "WHERE zone = %s FOR UPDATE",
            (zone,),
        )
        row = cur.fetchone()
        cur.execute(
            "REPLACE INTO replicator_leases (zone, holder, server_id, expires_at) VALUES (%s, %s, 0, "
            "NOW(6) + INTERVAL %s SECOND)",
            (zone, fence, FENCE_S),
        )
    left = float(row[1]) if row and not str(row[0]).startswith("failover:") else 0.0
    if left > 0:
        log.warning("zone %s: waiting %.1f s for the replicator lease of %s to run out", zone, left, row[0])
        time.sleep(min(left, FENCE_S) + FENCE_MARGIN_S)
    return fence


def _unfence(meta: MetaConfig, zone: str, fence: str) -> None:
    try:
        meta.run("DELETE FROM replicator_leases WHERE zone = %s AND holder = %s", (zone, fence))
    except Exception as exc:  # noqa: BLE001 - meta down: the fence expires by itself
        log.warning("zone %s: could not lift the failover's lease (it expires in %s s): %s", zone, FENCE_S, exc)


def _position(meta: MetaConfig, zone: str, new: SourceDB, address: str, allow_lost: bool):
    """Phase 3: (the newest checkpoint, where capture resumes on the new server, the GTID
    state there, the transactions given up or None)."""
    store = CheckpointStore(meta, zone)
    try:
        cp = store.latest()
    finally:
        store.close()
    if cp is None or cp.gtid_pos is None:
        why = "has no checkpoint yet" if cp is None else "has no checkpoint with a GTID position yet"
        raise FailoverRefused(f"zone {zone}'s capture {why}: start its replicator on the old primary first, or "
                              "point ZONESYNC_ZONE_<NAME>_URL at the new one if nothing was captured")  # fmt: skip
    state, lost = gtid.parse(cp.gtid_pos), None
    conn = new.connect()
    try:
        try:
            return cp, gtid.locate(conn, state, where=address), cp.gtid_pos, None
        except gtid.LostTransactions as exc:
            if not allow_lost:
                raise FailoverRefused(str(exc)) from None
            lost = ",".join(f"{d}-{state[d][0]}-{h + 1}..{n}" for d, (h, n) in exc.missing.items())
        # where the new server's copy of the old primary's history ends: capture resumes
        # there (its own writes since, if any, are read; none is skipped)
        state = gtid.clipped(gtid.binlog_state(conn), state)
        return cp, gtid.locate(conn, state, where=address), gtid.render(state), lost
    except gtid.GtidError as exc:
        raise FailoverRefused(str(exc)) from None
    finally:
        conn.close()


def next_floor(top: int) -> tuple[int, int]:
    """(the new segment's first LSN file number, its floor) above the highest LSN so far:
    the next file number's first LSN - 1. (top + 1: a segment that published nothing has
    its own floor as the highest; the next one goes above it, not onto it.)"""
    base_file = split_lsn(top + 1)[0] + 1
    return base_file, make_lsn(base_file, 0, 0) - 1


def _continued(cp, after: dict[int, tuple[int, int]]):
    """Phase 4: (each partition's last LSN, the published counts, the highest LSN) once the
    events published after the checkpoint are counted in."""
    lsns, counts = dict(cp.partition_lsns), None if cp.partition_counts is None else dict(cp.partition_counts)
    for p, (n, last) in after.items():
        lsns[p] = last
        if counts is not None:
            counts[p] = counts.get(p, 0) + n
    return lsns, counts, max([cp.published_hwm, cp.lsn, *lsns.values()])


def _record(meta: MetaConfig, current, seg: segments.Segment, cp, lsns, counts, top: int, by: str,
            fence: str) -> None:  # fmt: skip
    """Phase 5, one meta transaction: the segment, its first checkpoint, the fence lifted."""
    zone = seg.zone
    with meta.transaction() as cur:
        latest = segments.current(meta, zone, cur=cur)  # (a concurrent promotion: one of them wins)
        if (latest.segment if latest else None) != (current.segment if current else None):
            raise FailoverRefused(f"zone {zone}'s primary changed while this ran: run it again")
        cur.execute("SELECT MAX(lsn) FROM replicator_checkpoints WHERE zone = %s FOR UPDATE", (zone,))
        if int(cur.fetchone()[0] or 0) != cp.lsn:
            raise FailoverRefused(f"zone {zone}'s capture saved a checkpoint while this ran: run it again")
        cur.execute("DELETE FROM replicator_leases WHERE zone = %s AND holder = %s", (zone, fence))
        segments.insert(cur, seg, by)
        cur.execute(
            "INSERT INTO replicator_checkpoints (zone, lsn, log_file, log_pos, partition_lsns, published_hwm, "
            "partition_counts, segment, gtid_pos) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (zone, seg.lsn_floor, seg.first_file, seg.first_pos, json.dumps(lsns), top,
             None if counts is None else json.dumps(counts), seg.segment, seg.gtid_pos),
        )  # fmt: skip
