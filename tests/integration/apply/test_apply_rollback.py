"""Seed S003-08 (rollback: a batch fails to load) and seed S003-09 (pipe TTL: a partition
halts while batches for it are fetched or in flight).

S003-08: while zone b's applier loads a batch, the target transaction fails part-way: a
deadlock with a test transaction, lock-wait timeouts on a row a test transaction holds,
or the applier's connection killed (`KILL`) from another session. The transaction rolls
back whole (a reader polling zone b meanwhile never sees part of a source transaction:
its rows in one partition are there all together or not at all), and the batch is
applied again (retried by the writer, or re-read from Kafka after apply_state by a
restarted pass) and commits once: zone b ends equal to zone a, and each partition's
committed event count equals what zone a published.

S003-09: a partition halts while later batches for it are already fetched and handed
to the workers: nothing at or past the halt point lands while it is halted, other
partitions flow on, and after `zonesync resume` only events past the applied LSN are
applied, each once."""

from __future__ import annotations

import time

import pymysql
import pytest

from tests.support import apply_faults
from tests.support.apply_faults import RowLock, keys_of_partition, positions
from tests.support.background import Background, wait_until
from tests.support.replication import Cluster, alerts, checksum, reset_state, settled_reconciliation
from zonesync import cli
from zonesync.apply.tools.reconcile import OK

pytestmark = pytest.mark.integration

PARTITIONS = 2
P, Q = 0, 1  # the partition under test; another one
KEYS = keys_of_partition(P, PARTITIONS, 4 + 3 * 12)
RENAMED = KEYS[:4]  # every source transaction renames these rows...
NEW = KEYS[4:]  # ...and inserts three of these: transaction i inserts NEW[3i:3i+3]
HELD = RENAMED[0]  # the row a test transaction holds in zone b
OTHER = keys_of_partition(Q, PARTITIONS, 20, start=5000)  # rows of the other partition


INSERT = "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) VALUES (%s, %s, 1, 1)"


def new_rows(i: int) -> list[int]:
    return NEW[3 * i : 3 * i + 3]


class Source:
    """Zone a's transactions, each all in partition P: transaction 0 inserts RENAMED as
    't0'; transaction i renames them 't<i>' (version i + 1); each inserts its three new
    rows named after it."""

    def __init__(self, inst):
        self.conn = inst.connect("zonesync_app")
        self.conn.autocommit(False)
        self.written = 0

    def write(self, i: int, extra: list[str] = ()) -> None:
        with self.conn.cursor() as cur:
            if i == 0:
                for k in RENAMED:
                    cur.execute(INSERT, (k, "t0"))
            else:
                marks = ", ".join(["%s"] * len(RENAMED))
                cur.execute(
                    f"UPDATE tenants SET name = %s, _zs_version = %s WHERE tenant_id IN ({marks})",
                    (f"t{i}", i + 1, *RENAMED),
                )
            for k in new_rows(i):
                cur.execute(INSERT, (k, f"t{i}"))
            for sql in extra:
                cur.execute(sql)
        self.conn.commit()
        self.written = max(self.written, i + 1)

    def write_other(self, n: int) -> None:
        """A transaction of partition Q's rows only: OTHER[n]."""
        with self.conn.cursor() as cur:
            cur.execute(INSERT, (OTHER[n], "q"))
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


def state_of(rows) -> tuple[int | None, list[str]]:
    """The last source transaction a snapshot of zone b shows (None: not even the first),
    and what is inconsistent in it: the renamed rows disagree, or a transaction's new
    rows are there in part, or there without its renaming (or the reverse)."""
    names = dict(rows)
    renamed = {names.get(k) for k in RENAMED}
    wrong: list[str] = []
    if renamed == {None}:
        last = None
    elif len(renamed) != 1 or None in renamed:
        return None, [f"renamed rows disagree: {sorted(map(str, renamed))}"]
    else:
        last = int(renamed.pop()[1:])
    for i in range(len(NEW) // 3):
        present = sum(k in names for k in new_rows(i))
        expected = 3 if last is not None and i <= last else 0
        if present != expected:
            wrong.append(f"transaction {i}: {present} of its 3 new rows with the renaming of {last}")
    return last, wrong


def snapshot(inst) -> tuple[int | None, list[str]]:
    conn = inst.connect("zonesync_app")
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT tenant_id, name FROM tenants WHERE tenant_id IN ({', '.join(map(str, KEYS))})")
            return state_of(cur.fetchall())
    finally:
        conn.close()


class Reader(Background):
    """Polls zone b's rows of the source transactions (one statement: one consistent read
    of committed rows) and records every inconsistent snapshot."""

    name = "reader-b"

    def __init__(self, inst):
        super().__init__()
        self.conn = inst.connect("zonesync_app")
        self.reads = 0
        self.wrong: list[str] = []

    def _run(self) -> None:
        query = f"SELECT tenant_id, name FROM tenants WHERE tenant_id IN ({', '.join(map(str, KEYS))})"
        with self.conn.cursor() as cur:
            cur.execute("SET SESSION tx_isolation = 'READ-COMMITTED'")
            while not self._stop.is_set():
                cur.execute(query)
                _, wrong = state_of(cur.fetchall())
                self.wrong += wrong
                self.reads += 1
                time.sleep(0.005)

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.conn.close()


@pytest.fixture
def rollback_env(meta, zones, broker, test_cfg):
    """Zone a's replicator running on a 2-partition cluster; zone a's source transactions;
    zone b's applier is the test's to start (cluster.start)."""
    reset_state(zones, meta)
    cluster = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=PARTITIONS)
    cluster.start(which=("replicator",), zones=("a",))
    cluster.wait_started()
    source = Source(zones["a"])
    try:
        yield cluster, source
    finally:
        source.close()
        cluster.stop()
        reset_state(zones, meta)


def _applied(zones, i: int, timeout: float = 30) -> None:
    wait_until(lambda: snapshot(zones["b"])[0] == i, timeout, f"zone b shows source transaction {i}")


def _settled(zones, meta, reader) -> None:
    """Zone b equals zone a; the reader never saw part of a transaction; every partition
    committed as many events as zone a published (nothing applied twice, nothing lost)."""
    wait_until(lambda: checksum(zones["b"]) == checksum(zones["a"]), 30, "zone b equals zone a")
    assert reader.wrong == [], reader.wrong[:5]
    assert reader.reads > 20
    rows = settled_reconciliation(meta, zones, "b", sources=["a"], timeout=20)
    assert rows and all(r.status == OK for r in rows), [r for r in rows if r.status != OK]
    assert sum(r.committed for r in rows) == sum(r.published for r in rows) > 0


def _status(conn, name: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
        return int(cur.fetchone()[1])


# -- S003-08 ----------------------------------------------------------------------------------


def test_a_deadlocked_batch_rolls_back_whole_and_is_applied_again(rollback_env, zones, meta):
    cluster, source = rollback_env
    cluster.start(which=("applier",), zones=("b",))
    observer = zones["b"].connect()
    try:
        with Reader(zones["b"]) as reader:
            source.write(0)
            _applied(zones, 0)
            with RowLock(zones["b"], "tenants", "tenant_id", [HELD]) as lock:
                # the test's transaction outweighs the batch's (400 rows written, rolled back
                # at the end), so the deadlock's victim is the batch
                lock.execute(
                    "INSERT INTO tenants (tenant_id, name, _zs_origin, _zs_version) "
                    "SELECT seq, 'heavy', 2, 1 FROM seq_900001_to_900400"
                )
                source.write(1)  # its batch: apply_state claimed, new rows inserted, waits for HELD
                waiter = lock.wait_for_waiter(30)
                deadlocks = _status(observer, "Innodb_deadlocks")
                # the test now wants the batch's apply_state row: a cycle
                try:
                    lock.execute(
                        "SELECT * FROM zonesync.apply_state WHERE source_zone = 'a' AND partition_no = %s FOR UPDATE",
                        (P,),
                    )
                except pymysql.err.OperationalError as exc:
                    pytest.fail(f"the test's transaction, not the batch, was the deadlock's victim: {exc}")
                assert _status(observer, "Innodb_deadlocks") > deadlocks, "the batch was rolled back by a deadlock"
                # the batch, tried again on the same connection, waits for its apply_state row
                assert lock.wait_for_waiter(30, "the batch is tried again") == waiter
                assert snapshot(zones["b"]) == (0, []), "nothing of the rolled-back batch is visible"
            _applied(zones, 1)
            source.write(2)
            _applied(zones, 2)
        _settled(zones, meta, reader)
    finally:
        observer.close()


def test_lock_wait_timeouts_roll_the_batch_back_until_it_commits(rollback_env, zones, meta):
    cluster, source = rollback_env
    admin = zones["b"].connect()
    with admin.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.innodb_lock_wait_timeout")
        saved = cur.fetchone()[0]
        cur.execute("SET GLOBAL innodb_lock_wait_timeout = 1")  # the applier's sessions, opened from now on
    try:
        cluster.start(which=("applier",), zones=("b",))
        with Reader(zones["b"]) as reader:
            source.write(0)
            _applied(zones, 0)
            with RowLock(zones["b"], "tenants", "tenant_id", [HELD]) as lock:
                source.write(1)
                attempts: set = set()  # (connection, transaction) of each attempt that waited
                deadline = time.monotonic() + 30
                while len(attempts) < 3:
                    assert time.monotonic() < deadline, f"the batch was not tried again after a timeout: {attempts}"
                    attempts |= lock.waits()
                    time.sleep(0.25)
                assert snapshot(zones["b"]) == (0, []), "nothing of the timed-out attempts is visible"
            _applied(zones, 1)
            source.write(2)
            _applied(zones, 2)
        _settled(zones, meta, reader)
    finally:
        with admin.cursor() as cur:
            cur.execute("SET GLOBAL innodb_lock_wait_timeout = %s", (saved,))
        admin.close()


def test_a_batch_whose_connection_is_killed_is_read_again_and_applied(rollback_env, zones, meta):
    cluster, source = rollback_env
    cluster.start(which=("applier",), zones=("b",))
    observer = zones["b"].connect()
    try:
        with Reader(zones["b"]) as reader:
            source.write(0)
            _applied(zones, 0)
            before = positions(zones["b"], "a")[P]
            with RowLock(zones["b"], "tenants", "tenant_id", [HELD]) as lock:
                source.write(1)
                killed = lock.wait_for_waiter(30)
                with observer.cursor() as cur:
                    cur.execute(f"KILL {killed}")
                # the pass restarts from apply_state on a new connection and reads the batch
                # again from Kafka: it waits for the held row once more
                again = lock.wait_for_waiter(30, "the batch, read again, waits on a new connection", besides=[killed])
                assert again != killed
                assert not apply_faults.connection_alive(observer, killed)
                assert positions(zones["b"], "a")[P] == before, "the killed batch committed nothing"
                assert snapshot(zones["b"]) == (0, []), "nothing of the killed batch is visible"
            _applied(zones, 1)
            source.write(2)
            _applied(zones, 2)
        _settled(zones, meta, reader)
        assert not alerts(meta, "b", "partition_halted")
    finally:
        observer.close()


# -- S003-09 ----------------------------------------------------------------------------------

ONLY_IN_A = (
    "CREATE TABLE zonesync_app.only_in_a (id BIGINT PRIMARY KEY, v VARCHAR(10), "
    "_zs_origin SMALLINT NOT NULL DEFAULT 0, _zs_version BIGINT NOT NULL DEFAULT 0)"
)
MISSING_KEY = keys_of_partition(P, PARTITIONS, 1, table="only_in_a")[0]  # its event goes to partition P


def _unlogged(inst, *statements: str) -> None:
    """DDL in one zone only (not in its binlog: no other zone hears of it)."""
    conn = inst.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


@pytest.fixture
def only_in_a(zones):
    """A table zone a has and zone b lacks."""
    for z in ("a", "b"):
        _unlogged(zones[z], "DROP TABLE IF EXISTS zonesync_app.only_in_a")
    _unlogged(zones["a"], ONLY_IN_A)
    yield
    for z in ("a", "b"):
        _unlogged(zones[z], "DROP TABLE IF EXISTS zonesync_app.only_in_a")


def _table(inst, table: str) -> tuple:
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY 1")
        return tuple(cur.fetchall())


def _others_arrive(zones, source, count: int) -> None:
    """Partition Q flows: `count` new transactions of its rows land in zone b."""
    present = {r[0] for r in checksum(zones["b"])}
    fresh = [n for n in range(len(OTHER)) if OTHER[n] not in present][:count]
    for n in fresh:
        source.write_other(n)
    wait_until(lambda: {OTHER[n] for n in fresh} <= {r[0] for r in checksum(zones["b"])}, 30, "partition Q flows")


def test_a_partition_halted_with_rounds_in_flight_resumes_past_its_applied_lsn(rollback_env, only_in_a, zones, meta):
    """Round 1 of partition P waits mid-transaction (a held row), round 2 (an event of a table
    zone b lacks) is handed to the same worker behind it, round 3 is fetched and waits for
    the worker. Round 2 fails, the partition halts, and rounds 2 and 3 are dropped with the
    pass; while P is halted nothing of it lands and partition Q flows; after the table is
    created and `zonesync resume`, rounds 2 and 3 are read again from P's applied LSN and
    applied once."""
    cluster, source = rollback_env
    cluster.start(which=("applier",), zones=("b",), workers=2, small_round=0)  # every round to the workers
    applier, key = cluster.appliers["b"], ("a", P)
    with Reader(zones["b"]) as reader:
        source.write(0)
        _applied(zones, 0)
        with RowLock(zones["b"], "tenants", "tenant_id", [HELD]) as lock:
            source.write(1)
            lock.wait_for_waiter(30, "round 1 waits for the held row")
            source.write(2, extra=[f"INSERT INTO only_in_a VALUES ({MISSING_KEY}, 'x', 1, 1)"])
            wait_until(lambda: len(applier._in_flight) == 2, 30, "round 2 is handed to the worker behind round 1")
            handed = applier.book.state[key].applied_lsn
            source.write(3)
            wait_until(
                lambda: applier.book.state[key].applied_lsn > handed, 30, "round 3 is taken from what was fetched"
            )
        wait_until(lambda: positions(zones["b"], "a")[P][3] == "halted", 30, "partition P halts")
        halted = positions(zones["b"], "a")[P]
        assert snapshot(zones["b"]) == (1, []), "round 1 committed; rounds 2 and 3 did not"
        source.write(4)
        _others_arrive(zones, source, 3)
        assert positions(zones["b"], "a")[P] == halted, "nothing of the halted partition lands"
        assert snapshot(zones["b"]) == (1, [])
        assert [a["partition"] for a in alerts(meta, "b", "partition_halted")] == [P]

        _unlogged(zones["b"], ONLY_IN_A)
        assert cli.main(["resume", "--zone", "b", "--source", "a", "--partition", str(P)]) == 0
        _applied(zones, 4)
    _settled(zones, meta, reader)
    assert _table(zones["b"], "only_in_a") == _table(zones["a"], "only_in_a") != ()
    assert positions(zones["b"], "a")[P][3] == "running"


def _halt_with_a_round_in_flight(cluster, source, zones, meta):
    """Round 1 of partition P waits mid-transaction (a held row); round 2 is handed to the
    same worker behind it; then a malformed message reaches P and the applier halts it
    (its halt waits for the apply_state row round 1 claimed). Returns, once the halt is
    recorded and every round handed out has finished: (P's apply_state row then, the
    halt's alert)."""
    cluster.start(which=("applier",), zones=("b",), workers=2, small_round=0)
    applier = cluster.appliers["b"]
    observer = zones["b"].connect()
    try:
        source.write(0)
        _applied(zones, 0)
        with RowLock(zones["b"], "tenants", "tenant_id", [HELD]) as lock:
            source.write(1)
            first = lock.wait_for_waiter(30, "round 1 waits for the held row")
            source.write(2)
            wait_until(lambda: len(applier._in_flight) == 2, 30, "round 2 is handed to the worker behind round 1")
            apply_faults.produce_raw(cluster.bootstrap(), cluster.topic("a"), P, b"not json")
            apply_faults.wait_for_waiters(observer, first, 30, "the halt waits for round 1's apply_state row")
        wait_until(lambda: positions(zones["b"], "a")[P][3] == "halted", 30, "partition P halts")
        wait_until(lambda: not applier._in_flight, 30, "every round handed out has finished")
        wait_until(lambda: alerts(meta, "b", "partition_halted"), 10, "the halt is alerted")
        return positions(zones["b"], "a")[P], alerts(meta, "b", "partition_halted")[-1]
    finally:
        observer.close()


def test_a_round_in_flight_when_its_partition_halts_is_discarded(rollback_env, zones, meta):
    """Round 2, handed out before the halt, does not land after it (its claim finds the
    partition halted); nothing past the halt point lands while P is halted and Q flows on;
    after `zonesync resume` P is taken back from its applied LSN, and meets the malformed
    message again: it halts again, having applied nothing twice."""
    cluster, source = rollback_env
    with Reader(zones["b"]) as reader:
        halted, alert = _halt_with_a_round_in_flight(cluster, source, zones, meta)
        assert "malformed message at offset" in alert["detail"] and alert["partition"] == P
        assert snapshot(zones["b"]) == (1, []), "round 2, handed out before the halt, landed after it"
        source.write(3)  # past the halt point
        _others_arrive(zones, source, 3)
        assert positions(zones["b"], "a")[P] == halted
        assert snapshot(zones["b"]) == (1, []), "nothing past the halt point lands"

        assert cli.main(["resume", "--zone", "b", "--source", "a", "--partition", str(P)]) == 0
        wait_until(lambda: len(alerts(meta, "b", "partition_halted")) == 2, 30, "P meets the message again")
        wait_until(lambda: positions(zones["b"], "a")[P][3] == "halted", 30, "P halts again")
        again, shown = positions(zones["b"], "a")[P], snapshot(zones["b"])
        # round 2 (7 events of P, before the message) is applied once, or not yet when it
        # came in the same fetch as the message (the halt then precedes its claim again);
        # transaction 3, past the message, never
        assert shown in ((1, []), (2, [])), shown
        assert again[2] - halted[2] == (7 if shown[0] == 2 else 0), (halted, again)
        _others_arrive(zones, source, 2)
    assert reader.wrong == [], reader.wrong[:5]
    rows = settled_reconciliation(meta, zones, "b", sources=["a"], timeout=20)
    assert [r.status for r in rows] == [OK, OK], rows
    assert all(r.committed == r.published for r in rows)


@pytest.mark.parametrize(
    "field, value, words",
    [("pk", [1], "pk must be an object"), ("table", 5, "table must be"),
     ("version", 10**18, "ahead of this applier's clock"), ("source_zone", "c", "came on zone a's topic"),
     ("partition", Q, "came on partition")],
)  # fmt: skip
def test_a_poison_or_forged_event_halts_its_partition_only(rollback_env, zones, meta, field, value, words):
    """Issue 24: a JSON event whose fields have the wrong types (`"pk": [1]`, `"table": 5`)
    used to pass the decoder and fail in the writer, restarting every partition twice a
    second forever; a forged one (a version far in the future, which would make every
    later real change of the row "older" and skipped; another zone's event on a's topic)
    was applied. Each is refused before it is applied: its partition halts, alerted with
    the offset and what is wrong; the other partition flows on and nothing of it lands."""
    import json

    cluster, source = rollback_env
    cluster.start(which=("applier",), zones=("b",))
    source.write(0)
    _applied(zones, 0)
    before = positions(zones["b"], "a")[P]
    poison = {"lsn": before[2] + 1, "prev_lsn": before[2], "source_zone": "a", "origin_zone": 1, "table": "tenants",
              "pk": {"tenant_id": 999_999}, "op": "insert", "old": None,
              "new": {"tenant_id": 999_999, "name": "poison", "_zs_origin": 1, "_zs_version": 1}, "version": 1,
              "txn_id": "poison", "row_index": 0, "row_count": 1, "commit_ts": 1,
              "partition": P, field: value}  # fmt: skip
    apply_faults.produce_raw(cluster.bootstrap(), cluster.topic("a"), P, json.dumps([poison]).encode())
    wait_until(lambda: positions(zones["b"], "a")[P][3] == "halted", 30, "partition P halts")
    # the halt is recorded before its alert is sent
    wait_until(lambda: alerts(meta, "b", "partition_halted"), 10, "the halt is alerted")
    alert = alerts(meta, "b", "partition_halted")[-1]
    assert alert["partition"] == P and "malformed message at offset" in alert["detail"], alert
    assert words in alert["detail"], alert
    _others_arrive(zones, source, 2)
    assert positions(zones["b"], "a")[P][2] == before[2], "the halted partition applied nothing more"
    assert 999_999 not in {r[0] for r in checksum(zones["b"])}


@pytest.mark.parametrize(
    "changes, words",
    [({"table": "payroll"}, "table 'payroll' is not declared in the rules"),
     ({"pk": {"tenant_id": 500}, "new": {"tenant_id": 500, "name": "forged", "_zs_origin": 1, "_zs_version": 1}},
      "zone a did not own the row's ZSID")],
)  # fmt: skip
def test_an_event_outside_the_rules_halts_its_partition(rollback_env, zones, meta, changes, words):
    """Issue 24: with the owners' check on (the production default), a's own rows flow,
    but a row of a table the rules do not declare, or of a ZSID zone a did not own (tenant
    500 is b's by the baseline rules), halts the partition with an alert naming it, and
    nothing of it lands in b."""
    import json

    from tests.support.rules import rules_doc
    from zonesync.meta.store import MetaStore

    MetaStore(meta).publish_rules(rules_doc(), "test baseline")
    cluster, source = rollback_env
    cluster.start(which=("applier",), zones=("b",), check_owners=True)
    source.write(0)
    _applied(zones, 0)  # a's tenants (ZSIDs 0-399) pass the check
    before = positions(zones["b"], "a")[P]
    forged = {"lsn": before[2] + 1, "prev_lsn": before[2], "source_zone": "a", "origin_zone": 1, "table": "tenants",
              "pk": {"tenant_id": 999_999}, "op": "insert", "old": None,
              "new": {"tenant_id": 999_999, "name": "forged", "_zs_origin": 1, "_zs_version": 1},
              "version": time.time_ns() // 1000, "txn_id": "forged", "row_index": 0, "row_count": 1,
              "commit_ts": 1, "partition": P, **changes}  # fmt: skip
    apply_faults.produce_raw(cluster.bootstrap(), cluster.topic("a"), P, json.dumps([forged]).encode())
    wait_until(lambda: positions(zones["b"], "a")[P][3] == "halted", 30, "partition P halts")
    wait_until(lambda: alerts(meta, "b", "partition_halted"), 10, "the halt is alerted")
    alert = alerts(meta, "b", "partition_halted")[-1]
    assert alert["partition"] == P and words in alert["detail"], alert
    assert positions(zones["b"], "a")[P][2] == before[2], "the halted partition applied nothing more"
    assert not {500, 999_999} & {r[0] for r in checksum(zones["b"])}
