"""A paused applier that resumes after another took over its partitions cannot commit
(S003-36): each batch locks its apply_state rows and checks that they stand where its
chain starts, in the same transaction as its rows."""

from __future__ import annotations

import pytest

from tests.support.events import change_event
from tests.support.replication import reset_state
from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.errors import StalePosition
from zonesync.events import INSERT

pytestmark = pytest.mark.integration


def chain(start: int, tenants: list[int], name: str) -> list:
    """Insert events of `tenants`, chained after LSN `start` in partition 0."""
    out, prev = [], start
    for n, t in enumerate(tenants):
        lsn = start + 10 * (n + 1)
        new = {"tenant_id": t, "name": name, "_zs_origin": 1, "_zs_version": lsn}
        out.append(change_event(lsn=lsn, prev_lsn=prev, op=INSERT, table="tenants", pk={"tenant_id": t}, version=lsn,
                                new=new))  # fmt: skip
        prev = lsn
    return out


def test_a_stale_applier_commits_nothing_and_the_position_never_moves_back(zones, meta):
    reset_state(zones, meta)
    inst = zones["b"]
    live = ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app")
    zombie = ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app")
    conn = inst.connect()
    try:
        live.ensure_positions([("a", 0), ("a", 1)])
        assert live.state()[("a", 0)][:2] == (0, -1)
        # both read partition 0 at LSN 0; the live applier commits its batch first
        first = chain(0, [1, 2], "live")
        live.apply_many([("a", first)], [("a", 0, first[-1].lsn, 7, 0)])
        # the zombie's batch starts after LSN 0 as well: refused, none of its rows written
        stale = chain(0, [3, 4], "zombie")
        with pytest.raises(StalePosition, match="partition 0 is at LSN 20"):
            zombie.apply_many([("a", stale)], [("a", 0, stale[-1].lsn, 5, 0)])
        # the live applier goes on from where it stands
        nxt = chain(first[-1].lsn, [5], "live")
        live.apply_many([("a", nxt)], [("a", 0, nxt[-1].lsn, 8, first[-1].lsn)])
        with conn.cursor() as cur:
            cur.execute("SELECT tenant_id, name FROM zonesync_app.tenants ORDER BY tenant_id")
            assert cur.fetchall() == ((1, "live"), (2, "live"), (5, "live"))
        assert live.state()[("a", 0)][:2] == (30, 8), "the position is the live applier's"
        # a batch whose chain starts where the row stands goes through (the zombie, re-read)
        again = chain(30, [6], "zombie, re-read")
        zombie.apply_many([("a", again)], [("a", 0, again[-1].lsn, 9, 30)])
        assert live.state()[("a", 0)][:2] == (40, 9)
    finally:
        live.close()
        zombie.close()
        conn.close()
        reset_state(zones, meta)
