"""S004-34: zones that run in different system time zones replicate DATETIME, TIMESTAMP and
DATE values unchanged.

Zone a's server runs with --default-time-zone=+08:00, zone b's with TZ=America/New_York
(-05:00, and DST); the replicator and applier (threads of this process) run under a third
time zone, +05:45. Application sessions write in their zone's local time: a TIMESTAMP literal
is the zone's local time, a DATETIME or DATE literal is what it says. After replication both
ways, every zone must hold the same UTC instant for each TIMESTAMP (UNIX_TIMESTAMP) and the
same literal DATETIME and DATE. The values sit where a wrong conversion shows: near midnight
(the date differs between local time and UTC), around New York's spring-forward gap (a
DATETIME inside it; a TIMESTAMP cannot be: strict mode refuses a local time that does not
exist), and in its fall-back hour (01:30 happens twice: two instants one hour apart must stay
two instants).

Two tables: `moments` is decoded by the lean row reader (capture/rows.py), `moments_lib`
by pymysqlreplication (its TIME column sends it there). Its negative TIMEs caught two bugs:
the library's decoding of a negative TIME with a fraction, and pymysql's literal of a
negative timedelta (rows.py `_time2`, literals.py `time_literal`)."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import time
from decimal import Decimal

import pytest

from tests.support.replication import ZONE_IDS, Cluster, reset_state
from zonesync.dev import env, mariadb, procs

pytestmark = pytest.mark.integration

# Zone a: --default-time-zone (the process itself in UTC); zone b: the process's TZ, session SYSTEM.
TIME_ZONES = {"a": {"default_time_zone": "+08:00", "tz": "UTC"}, "b": {"tz": "America/New_York"}}
WORKERS_TZ = "Asia/Kathmandu"  # +05:45: neither zone's, nor UTC
TABLES = ("moments", "moments_lib")
DDL = """CREATE TABLE zonesync_app.{table} (
    id          BIGINT       NOT NULL PRIMARY KEY,
    note        VARCHAR(64)  NOT NULL,
    dt          DATETIME(6)  NULL,
    ts          TIMESTAMP(6) NULL DEFAULT NULL,
    d           DATE         NULL,
    touched     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    {extra}
    _zs_origin  SMALLINT     NOT NULL DEFAULT 0,
    _zs_version BIGINT       NOT NULL DEFAULT 0
) ENGINE=InnoDB"""
# What every zone must agree on: TIMESTAMPs as UTC instants, DATETIMEs and DATEs as written.
SNAPSHOT = (
    "SELECT id, note, CAST(dt AS CHAR), UNIX_TIMESTAMP(ts), CAST(d AS CHAR), UNIX_TIMESTAMP(touched), {extra}"
    "_zs_origin, _zs_version FROM zonesync_app.{table} ORDER BY id"
)

# (id, note, dt, ts in the writing zone's local time, d, t for moments_lib)
ROWS = {
    "a": [
        (1, "a: local 07:30 is 23:30 UTC the day before", "2024-01-01 00:00:00.000001", "2024-01-01 07:30:00.250000",
         "2024-01-01", "23:59:59.999999"),
        (2, "a: New York's first 01:30 (EDT)", "2024-03-10 02:30:00", "2024-11-03 13:30:00", "2024-03-10",
         "-01:30:00"),
        (3, "a: New York's second 01:30 (EST)", "2024-11-03 01:30:00", "2024-11-03 14:30:00", "2024-11-03",
         "00:00:00"),
        (4, "a: just after New York's gap", "2023-12-31 23:59:59.999999", "2024-03-10 15:30:00.500000", "2023-12-31",
         "838:59:59"),
    ],
    "b": [
        (11, "b: the ambiguous 01:30", "2024-11-03 01:30:00", "2024-11-03 01:30:00", "2024-11-03", "01:30:00"),
        (12, "b: just before the gap", "2024-03-10 02:30:00", "2024-03-10 01:59:59.999999", "2024-03-10",
         "02:30:00"),
        (13, "b: local evening is next year in UTC", "2024-12-31 23:59:59.999999", "2024-12-31 19:30:00",
         "2024-12-31", "23:59:59"),
        (14, "b: a DATETIME inside the gap, a NULL TIMESTAMP", "2024-03-10 02:30:00.5", None, "2024-03-10", None),
        (15, "b: just after the gap", "2024-03-10 03:00:00", "2024-03-10 03:30:00", "2024-03-10", "-00:00:00.000001"),
    ],
}  # fmt: skip

# UTC instants the writing zone must have stored (proves the zones really run in their time zones).
EXPECTED_UTC = {
    1: "2023-12-31 23:30:00.250000",
    2: "2024-11-03 05:30:00",
    3: "2024-11-03 06:30:00",
    4: "2024-03-10 07:30:00.500000",
    12: "2024-03-10 06:59:59.999999",
    13: "2025-01-01 00:30:00",
    15: "2024-03-10 07:30:00",
}

_versions = itertools.count(int(time.time() * 1_000_000))


def _epoch(utc: str) -> Decimal:
    moment = dt.datetime.fromisoformat(utc).replace(tzinfo=dt.UTC)
    return Decimal(int(moment.timestamp())) + Decimal(moment.microsecond) / 1_000_000


@pytest.fixture(scope="module")
def tz_zones(zones, test_cfg):
    """Zones a and b as private mariadbds in their own time zones (bookkeeping, sample schema,
    the two test tables); stopped at the end of the module."""
    base = procs.free_port_block(len(TIME_ZONES))
    started: dict[str, mariadb.Instance] = {}
    try:
        for i, (z, tz) in enumerate(TIME_ZONES.items()):
            inst = mariadb.Instance(
                f"tz-zone-{z}",
                base + i,
                100 + ZONE_IDS[z],
                test_cfg.data_dir / f"tz-zone-{z}",
                gtid_domain_id=ZONE_IDS[z],
                **tz,
            )
            started[z] = inst
            mariadb.start(inst, test_cfg.run_dir, test_cfg.log_dir, test_cfg.data_dir)
            for path in [*sorted(env.ZONE_BOOKKEEPING.glob("*.sql")), env.SAMPLE_SCHEMA]:
                env._run_sql_file(inst, path)
            with inst.connect().cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                for table in TABLES:
                    cur.execute(f"DROP TABLE IF EXISTS zonesync_app.{table}")
                    extra = "t TIME(6) NULL," if table == "moments_lib" else ""
                    cur.execute(DDL.format(table=table, extra=extra))
        yield started
    finally:
        for inst in started.values():
            procs.stop(test_cfg.run_dir, inst.name)


@pytest.fixture
def workers_tz():
    """This process (the replicator's and applier's host) in a time zone of its own."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = WORKERS_TZ
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.fixture
def tz_cluster(tz_zones, zones, meta, broker, test_cfg, workers_tz):
    """Replicator and applier of zones a and b (the private ones), from and back to clean state."""
    both = {"a": tz_zones["a"], "b": tz_zones["b"], "c": zones["c"]}
    reset_state(both, meta)
    cluster = Cluster(both, meta, broker, test_cfg.broker_file, partitions=4)
    try:
        cluster.start(zones=("a", "b"))
        cluster.wait_started()
        yield cluster
    finally:
        cluster.stop()
        reset_state(zones, meta)


def _snapshot(inst, table: str) -> list[tuple]:
    with inst.connect().cursor() as cur:
        extra = "CAST(t AS CHAR), " if table == "moments_lib" else ""
        cur.execute(SNAPSHOT.format(table=table, extra=extra))
        return list(cur.fetchall())


def _local_session(inst, zone: str):
    """An application's session: the zone's own time zone, published changes (no skip flag)."""
    conn = inst.connect("zonesync_app")
    with conn.cursor() as cur:
        cur.execute("SELECT @@session.time_zone, TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW())")
        session_tz, offset = cur.fetchone()
    want = {"a": ("+08:00", {480}), "b": ("SYSTEM", {-300, -240})}[zone]
    assert (session_tz, offset in want[1]) == (want[0], True), f"zone {zone} runs at {session_tz}, {offset} min"
    return conn


def _insert(conn, zone: str, rows) -> None:
    with conn.cursor() as cur:
        for rid, note, dtv, ts, d, t in rows:
            for table in TABLES:
                cols = ["id", "note", "dt", "ts", "d", "_zs_origin", "_zs_version"]
                params = [rid, note, dtv, ts, d, ZONE_IDS[zone], next(_versions)]
                if table == "moments_lib":
                    cols, params = [*cols, "t"], [*params, t]
                cur.execute(
                    f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(params))})", params
                )


def _update(conn, zone: str, rid: int, assignments: str) -> None:
    """An update by an application session of `zone` (its local time zone): the row becomes the zone's."""
    with conn.cursor() as cur:
        for table in TABLES:
            changed = cur.execute(
                f"UPDATE {table} SET {assignments}, _zs_origin = %s, _zs_version = %s WHERE id = %s",
                (ZONE_IDS[zone], next(_versions), rid),
            )
            assert changed == 1, f"{table} row {rid} not updated in {zone}"


def _wait_identical(tz_zones, truth: dict[str, list[tuple]], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = {t: {z: _snapshot(inst, t) for z, inst in tz_zones.items()} for t in TABLES}
        if all(rows == truth[t] for t in TABLES for rows in got[t].values()):
            return
        if time.monotonic() > deadline:
            diffs = {
                (t, z): [(w, g) for w, g in zip(truth[t], rows, strict=False) if w != g] or f"{len(rows)} rows"
                for t in TABLES
                for z, rows in got[t].items()
                if rows != truth[t]
            }
            raise AssertionError(f"zones differ from the writers' values after {timeout} s: {diffs}")
        time.sleep(0.1)


def _truth(tz_zones, owners: dict[int, str]) -> dict[str, list[tuple]]:
    """Each row as the zone that last wrote it holds it."""
    out = {}
    for t in TABLES:
        by_zone = {z: {r[0]: r for r in _snapshot(inst, t)} for z, inst in tz_zones.items()}
        out[t] = [by_zone[owners[rid]][rid] for rid in sorted(owners)]
    return out


def test_datetime_timestamp_and_date_are_identical_in_zones_of_different_time_zones(tz_cluster, tz_zones):
    a, b = _local_session(tz_zones["a"], "a"), _local_session(tz_zones["b"], "b")
    _insert(a, "a", ROWS["a"])
    _insert(b, "b", ROWS["b"])
    owners = {r[0]: z for z in ROWS for r in ROWS[z]}
    truth = _truth(tz_zones, owners)
    for t in TABLES:  # the writers stored the instants their local times name
        stored = {r[0]: r[3] for r in truth[t]}
        assert {rid: stored[rid] for rid in EXPECTED_UTC} == {rid: _epoch(u) for rid, u in EXPECTED_UTC.items()}
        assert stored[2] + 3600 == stored[3], "the two 01:30s of New York are an hour apart"
    _wait_identical(tz_zones, truth)

    # Both ways again: each zone updates the other's rows in its own local time (the applier's
    # old-row check must find the replicated TIMESTAMPs equal, or it locks the row), and its own
    # with arithmetic in local time across the DST change; `touched` moves by ON UPDATE at the
    # writer only, and the applier must not move it again.
    _update(b, "b", 1, "ts = '2024-11-03 01:30:00', dt = '2024-11-03 00:00:00', d = '2024-11-04'")
    _update(b, "b", 2, "ts = ts + INTERVAL 1 HOUR, dt = dt + INTERVAL 1 DAY, d = d - INTERVAL 1 DAY")
    _update(b, "b", 12, "ts = ts + INTERVAL 2 HOUR")  # 01:59:59 EST + 2 h local: 03:59:59 EDT, one real hour
    _update(a, "a", 11, "ts = '2024-01-01 00:00:00', dt = '2024-01-01 00:00:00', d = '2024-01-01'")
    _update(a, "a", 13, "ts = ts - INTERVAL 8 HOUR, d = '2025-01-01'")
    _update(a, "a", 4, "note = 'a: touched only'")
    owners.update({1: "b", 2: "b", 12: "b", 11: "a", 13: "a", 4: "a"})
    truth = _truth(tz_zones, owners)
    for t in TABLES:
        stored = {r[0]: r for r in truth[t]}
        assert stored[11][3] == _epoch("2023-12-31 16:00:00"), "a's local midnight is 16:00 UTC"
        assert stored[13][3] == _epoch("2024-12-31 16:30:00")
        assert stored[13][4] == "2025-01-01"
        assert stored[12][3] == _epoch(EXPECTED_UTC[12]) + 3600
        assert stored[4][2:5] == (ROWS["a"][3][2], _epoch(EXPECTED_UTC[4]), ROWS["a"][3][4])
    _wait_identical(tz_zones, truth)

    for z, inst in tz_zones.items():  # no row locked, nothing held
        with inst.connect().cursor() as cur:
            cur.execute("SELECT table_name, pk, reason FROM zonesync.row_locks")
            assert cur.fetchall() == (), f"zone {z} locked rows"
    made = {"a": len(TABLES) * (len(ROWS["a"]) + 3), "b": len(TABLES) * (len(ROWS["b"]) + 3)}
    deadline = time.monotonic() + 10  # an applier counts a round just after it commits
    while sum(ap.applied for ap in tz_cluster.appliers.values()) < sum(made.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {z: tz_cluster.replicators[z].published for z in ("a", "b")} == made, "no loop traffic"
    assert {z: ap.applied for z, ap in tz_cluster.appliers.items()} == {"a": made["b"], "b": made["a"]}
    for conn in (a, b):
        conn.close()
