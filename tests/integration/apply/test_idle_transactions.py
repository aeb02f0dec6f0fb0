"""A frozen applier's open transaction does not hold its partition (S003-37).

An applier claims a partition (its apply_state row, FOR UPDATE) before it writes the
round's rows. A worker frozen between the claim and its COMMIT would keep that row
locked until it woke, and the worker that took the partition over would wait on it. The
applier's connections ask the server to roll back a transaction silent for
`idle_transaction_s` (MariaDB's idle_transaction_timeout)."""

from __future__ import annotations

import time

import pymysql
import pytest

from zonesync.apply.batch.writer import ZoneWriter
from zonesync.apply.bookkeeping import apply_state

pytestmark = pytest.mark.integration

KEY = ("a", 0)


def _claimed(inst, idle_s: float | None):
    """A writer whose transaction holds the claim of partition KEY, then goes silent."""
    writer = ZoneWriter("127.0.0.1", inst.port, "root", "", "zonesync_app")
    writer.idle_transaction_s = idle_s
    conn = writer.connect()
    apply_state.ensure(conn, [KEY])
    with conn.cursor() as cur:
        cur.execute("SELECT applied_lsn FROM zonesync.apply_state WHERE source_zone = %s AND partition_no = %s "
                    "FOR UPDATE", KEY)  # fmt: skip
    return writer, conn


def _lockable(inst) -> bool:
    """Whether another worker can claim partition KEY right now."""
    other = inst.connect()
    try:
        with other.cursor() as cur:
            cur.execute("SELECT applied_lsn FROM zonesync.apply_state WHERE source_zone = %s AND partition_no = %s "
                        "FOR UPDATE NOWAIT", KEY)  # fmt: skip
        other.rollback()
        return True
    except pymysql.err.OperationalError as e:
        assert e.args[0] in (1205, 3572, 1913), e  # lock wait timeout / NOWAIT refusals
        return False
    finally:
        other.close()


def test_a_silent_transaction_is_rolled_back_and_frees_its_claim(zones):
    inst = zones["b"]
    writer, conn = _claimed(inst, idle_s=1)
    try:
        assert not _lockable(inst), "the claim holds the row while its transaction is open"
        deadline = time.monotonic() + 10
        while not _lockable(inst):
            assert time.monotonic() < deadline, "the silent transaction still holds the claim after 10 s"
            time.sleep(0.2)
        # the frozen worker, woken, finds its transaction gone: nothing it does now commits
        with pytest.raises(pymysql.err.Error):
            with conn.cursor() as cur:
                cur.execute("UPDATE zonesync.apply_state SET applied_lsn = 99 WHERE source_zone = %s "
                            "AND partition_no = %s", KEY)  # fmt: skip
            conn.commit()
    finally:
        writer.close()
    assert apply_state.read(inst.connect())[KEY][0] != 99


def test_without_the_limit_the_claim_stays_held(zones):
    """The control: the server's default keeps a silent transaction's locks."""
    inst = zones["b"]
    writer, _ = _claimed(inst, idle_s=None)
    try:
        time.sleep(2.5)
        assert not _lockable(inst)
    finally:
        writer.close()
