"""Binlog retention (S001-06, Pegasus's delay GC): safe-purge removes only files that
no consumer can need again, the slowest target zone holds the rest, and naming a
still-needed file is refused. By age (S002-09): only files both old enough and safe go,
the old-enough ones a consumer needs are kept and reported, bad values are refused.
With real workers (S001-07): the file an applier that stopped behind still needs survives
`zonesync binlog safe-purge` while another applier is past it, and after the broker lost
the topics that applier's resend is served from that file."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.support.background import wait_until
from tests.support.replication import (
    Cluster,
    alerts,
    checksum,
    insert_tenants,
    latest_checkpoint,
    reset_state,
    wait_converged,
)
from zonesync import cli
from zonesync.capture.checkpoints import Checkpoint, CheckpointStore
from zonesync.capture.purge import closed_at, needed_file, safe_purge
from zonesync.events import file_number, partition_of, pk_text

pytestmark = pytest.mark.integration


def _files(conn) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [r[0] for r in cur.fetchall()]


def _rotate(conn, n: int, apart: float = 0.0, rows: int = 1) -> list[tuple[str, int]]:
    """n fresh binlog files, `rows` rows in each (one transaction: tenants 900000 + i * rows ..),
    opened `apart` seconds after one another; the position after each file's rows."""
    out = []
    with conn.cursor() as cur:
        for i in range(n):
            if i:
                time.sleep(apart)
            cur.execute("FLUSH BINARY LOGS")
            cur.execute(
                "INSERT INTO zonesync_app.tenants (tenant_id, name, _zs_origin, _zs_version) VALUES "
                + ",".join(f"({900_000 + i * rows + k}, 'p', 1, 1)" for k in range(rows))
            )
            cur.execute("SHOW MASTER STATUS")
            f, pos = cur.fetchone()[:2]
            out.append((f, int(pos)))
        # the server keeps a file until the engine has flushed its commits: wait for the binlog
        # checkpoint that names the last file
        cur.execute("FLUSH ENGINE LOGS")
        deadline = time.monotonic() + 10
        while True:
            cur.execute(f"SHOW BINLOG EVENTS IN '{out[-1][0]}'")
            if any(r[2] == "Binlog_checkpoint" and out[-1][0] in r[5] for r in cur.fetchall()):
                return out
            assert time.monotonic() < deadline, "the binlog checkpoint never reached the last file"
            time.sleep(0.1)


def _applied(meta, target: str, lsn: int) -> None:
    with meta.connect().cursor() as cur:
        cur.execute(
            "REPLACE INTO apply_lag (source_zone, target_zone, partition_no, applied_lsn, behind_events, "
            "behind_seconds) VALUES ('a', %s, 0, %s, 0, 0)",
            (target, lsn),
        )


def test_only_files_every_consumer_confirmed_past_are_purged(zones, meta):
    reset_state(zones, meta)
    conn = zones["a"].connect()
    conn.autocommit(True)
    try:
        assert needed_file(meta, "a")[0] is None, "no checkpoint yet: nothing may go"
        positions = _rotate(conn, 4)  # files f1 .. f4
        store = CheckpointStore(meta, "a")
        try:  # the replicator's checkpoints in f2, f3 and f4, partition 0 at LSN 100, 200, 300
            for lsn, (f, pos) in zip((100, 200, 300), positions[1:], strict=True):
                store.save(Checkpoint("a", lsn, f, pos, {0: lsn}, lsn))
        finally:
            store.close()
        f1, f2, f3, f4 = (f for f, _ in positions)

        _applied(meta, "b", 300)  # b is done; c never reported: it may still need everything
        keep, why = needed_file(meta, "a")
        assert keep is None and "zone c" in why
        assert safe_purge(meta, "a", source_conn=conn) == (None, why)
        assert f1 in _files(conn)

        _applied(meta, "c", 250)  # c, the slow one, needs what follows LSN 200: the checkpoint in f3
        assert needed_file(meta, "a")[0] == f3
        assert safe_purge(meta, "a", dry_run=True, source_conn=conn)[0] == f3
        assert f1 in _files(conn), "a dry run purges nothing"

        refused, why = safe_purge(meta, "a", source_conn=conn, to_file=f4)
        assert refused is None and why.startswith("refused") and f3 in why
        assert f1 in _files(conn), "naming a file after a still-needed one is refused"

        assert safe_purge(meta, "a", source_conn=conn, to_file=f2)[0] == f2  # an earlier file: as asked
        assert f1 not in _files(conn) and f2 in _files(conn)

        purged, why = safe_purge(meta, "a", source_conn=conn)
        assert purged == f3 and "zone c partition 0" in why
        files = _files(conn)
        assert f2 not in files and {f3, f4} <= set(files), "the needed file and every later one survive"
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id >= 900000")
        conn.close()
        reset_state(zones, meta)


def test_a_running_copy_holds_the_files_its_start_positions_need(zones, meta):
    """A copy into c recorded a's partition 0 at LSN 150 as its start (c's appliers replay
    from there), but c's last report still says LSN 400, from before the copy moved it:
    the copy's start holds f2 until it ends."""
    reset_state(zones, meta)
    conn = zones["a"].connect()
    conn.autocommit(True)
    try:
        positions = _rotate(conn, 4)
        store = CheckpointStore(meta, "a")
        try:
            for lsn, (f, pos) in zip((100, 200, 300), positions[1:], strict=True):
                store.save(Checkpoint("a", lsn, f, pos, {0: lsn}, lsn))
        finally:
            store.close()
        f1, f2, f3, f4 = (f for f, _ in positions)
        _applied(meta, "b", 300)
        _applied(meta, "c", 300)
        assert needed_file(meta, "a")[0] == f4
        meta.run(
            "INSERT INTO copies (run_id, source_zone, target_zone, mode, tables_json, reason, actor, start_json) "
            "VALUES ('purge-test', 'b', 'c', 'rebuild', '[\"tenants\"]', 'test', 'test', %s)",
            ('{"a": {"0": [150, 7]}, "b": {"0": [9, 9]}}',),
        )
        keep, why = needed_file(meta, "a")
        assert keep == f2 and "the copy purge-test into c, partition 0 (applied LSN 150)" in why, why
        assert safe_purge(meta, "a", source_conn=conn)[0] == f2
        assert _files(conn)[0] == f2, "the copy's start file survives"
        meta.run("UPDATE copies SET status = 'succeeded' WHERE run_id = 'purge-test'")
        assert needed_file(meta, "a")[0] == f4, "an ended copy holds nothing"
    finally:
        meta.run("DELETE FROM copies WHERE run_id = 'purge-test'")
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id >= 900000")
        conn.close()
        reset_state(zones, meta)


def _purge(capsys, *args: str) -> tuple[int, str]:
    """`zonesync binlog safe-purge --zone a ARGS`: (exit code, stdout + stderr)."""
    try:
        code = cli.main(["binlog", "safe-purge", "--zone", "a", *args])
    except SystemExit as exc:  # argparse refuses the combination
        code = exc.code
    out = capsys.readouterr()
    return code, out.out + out.err


def test_age_purge_takes_only_files_old_enough_and_safe_and_reports_the_needed_ones(zones, meta, capsys):
    reset_state(zones, meta)
    conn = zones["a"].connect()
    conn.autocommit(True)
    try:
        started = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
        # files f1 .. f5, opened 1.1 s apart: the server's times have whole seconds
        positions = _rotate(conn, 5, apart=1.1)
        f1, f2, f3, f4, f5 = (f for f, _ in positions)
        closed = closed_at(conn, _files(conn))
        assert set(closed) == set(_files(conn)[:-1]) and f5 not in closed, "the file being written has no age"
        assert started - dt.timedelta(seconds=2) <= closed[f1] < closed[f2] < closed[f3] < closed[f4]
        assert closed[f4] <= dt.datetime.now(dt.UTC).replace(tzinfo=None)
        store = CheckpointStore(meta, "a")
        try:  # the replicator's checkpoints in f2 .. f5, partition 0 at LSN 100 .. 400
            for lsn, (f, pos) in zip((100, 200, 300, 400), positions[1:], strict=True):
                store.save(Checkpoint("a", lsn, f, pos, {0: lsn}, lsn))
        finally:
            store.close()
        _applied(meta, "b", 400)
        _applied(meta, "c", 150)  # the slow consumer: it needs what follows LSN 100, from f2 on
        assert needed_file(meta, "a")[0] == f2
        # a cutoff between f3's close and f4's: f1, f2, f3 (and whatever came before) are old enough
        cutoff = (closed[f3] + dt.timedelta(seconds=1)).strftime("%Y-%m-%d %H:%M:%S")
        assert closed[f4] >= closed[f3] + dt.timedelta(seconds=1)

        code, out = _purge(capsys, "--before", cutoff, "--dry-run")
        assert code == 1 and f"would purge {_files(conn)[0]}" in out and f1 in out, out
        assert f1 in _files(conn), "a dry run purges nothing"

        code, out = _purge(capsys, "--before", cutoff)
        files = _files(conn)
        assert files[0] == f2 and files[-4:] == [f2, f3, f4, f5], "only the files old enough and safe are gone"
        assert code == 1, "old-enough files held back by a consumer: exit 1"
        kept = [line for line in out.splitlines() if line.startswith("kept ")]
        assert len(kept) == 2 and kept[0].startswith(f"kept {f2} ") and kept[1].startswith(f"kept {f3} "), out
        assert "zone c partition 0 (applied LSN 150)" in kept[0] and f"stops at {f2}" in kept[1], out
        assert f4 not in out and f5 not in out, "files too young are not reported: the age keeps them"

        _applied(meta, "c", 400)  # c caught up: everything before f5 is safe, but f4 is too young
        code, out = _purge(capsys, "--before", cutoff)
        assert code == 0 and f"purged {f2}, {f3} " in out and "kept" not in out, out
        assert _files(conn)[:2] == [f4, f5], "f4 is safe but not old enough"

        code, out = _purge(capsys, "--older-than", "1d")  # no file of this test session is a day old
        assert code == 0 and "no binlog file of zone a was closed before" in out, out
        assert _files(conn)[:2] == [f4, f5]
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id >= 900000")
        conn.close()
        reset_state(zones, meta)


@pytest.mark.parametrize(
    "args, names",
    [
        (["--older-than", "1 day"], ["--older-than", "1d, 12h, 30m"]),
        (["--older-than", "0h"], ["--older-than", "1d, 12h, 30m"]),
        (["--older-than", "12x"], ["--older-than", "1d, 12h, 30m"]),
        (["--before", "2026/11/22 16:30:00"], ["--before", "YYYY-MM-DD HH:MM:SS"]),
        (["--before", "yesterday"], ["--before", "YYYY-MM-DD HH:MM:SS"]),
        (["--before", "2999-01-01 00:00:00"], ["--before", "in the future"]),
        (["--before", "2026-11-22 16:30:00", "--to", "binlog.000001"], ["--to", "--before", "not allowed"]),
        (["--before", "2026-11-22 16:30:00", "--older-than", "1d"], ["--older-than", "--before", "not allowed"]),
        (["--older-than", "1d", "--to", "binlog.000001"], ["--to", "--older-than", "not allowed"]),
    ],
)
def test_age_purge_refuses_bad_values(zones, meta, capsys, args, names):
    conn = zones["a"].connect()
    try:
        before = _files(conn)
        code, out = _purge(capsys, *args)
        assert code == 2 and all(n in out for n in names), out
        assert _files(conn) == before, "nothing purged"
    finally:
        conn.close()


def _wait(cond, what: str, timeout: float = 30.0, step: float = 0.1):
    return wait_until(cond, timeout, what, step=step)


def _reported(meta, target: str) -> dict[int, int]:
    """The applied LSN per partition of a -> target, as the target's applier last reported it."""
    rows, _ = meta.run(
        "SELECT partition_no, applied_lsn FROM apply_lag WHERE source_zone = 'a' AND target_zone = %s", (target,)
    )
    return {int(p): int(lsn) for p, lsn in rows}


def _committed(inst) -> dict[int, int]:
    """The applied LSN per partition of a, as the target zone committed it (apply_state)."""
    with inst.connect().cursor() as cur:
        cur.execute("SELECT partition_no, applied_lsn FROM zonesync.apply_state WHERE source_zone = 'a'")
        return {int(p): int(lsn) for p, lsn in cur.fetchall()}


def test_a_stopped_appliers_file_survives_the_purge_and_serves_its_resend(zones, meta, broker, test_cfg, capsys):
    """S001-07: zone a's replicator and the appliers of b and c run for real. c stops after
    the first rows (applied Y); a's binlog rotates three times with rows in each file, which
    the replicator publishes and checkpoints (X > Y) and b applies. `zonesync binlog
    safe-purge --zone a` keeps the file c's resend from Y would start in (naming c), though
    b is past every file; the files before it go. Then the broker loses the topics (the
    workers restart on fresh, empty ones) and new rows are written: c finds the gap after Y,
    asks a resend, the replicator serves it from the kept file, and all zones converge."""
    reset_state(zones, meta)
    conn = zones["a"].connect()
    conn.autocommit(True)
    clusters: list[Cluster] = []
    try:
        first = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=2)
        clusters.append(first)
        first.start(which=("replicator",), zones=("a",))
        first.start(which=("applier",), zones=("b", "c"))
        first.wait_started()
        chain_start = latest_checkpoint(meta, "a").log_file
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")  # the chain's start stays behind, in a file nobody needs
        insert_tenants(conn, 1, 20)
        _wait(lambda: checksum(zones["b"]) == checksum(zones["c"]) == checksum(zones["a"]), "b and c applied 1..20")
        # c's report is what safe-purge reads: stop c once it reported what it committed
        y = _wait(lambda: (done := _committed(zones["c"])) == _reported(meta, "c") and done, "c reported its position")
        first.stop("applier-c")
        assert sorted(y) == [0, 1] and all(y.values()), y

        rotated = [f for f, _ in _rotate(conn, 3, rows=8)]  # f1, f2, f3: the rows c lacks
        assert {partition_of("tenants", pk_text({"tenant_id": 900_000 + k}), 2) for k in range(8)} == {0, 1}

        def b_past_everything():
            cp = latest_checkpoint(meta, "a")
            return cp.log_file == rotated[-1] and _reported(meta, "b") == {p: cp.partition_lsns.get(p) for p in (0, 1)}

        _wait(b_past_everything, "b applied and reported every row of f3")

        code, out = _purge(capsys)  # zonesync binlog safe-purge --zone a
        assert code == 0 and out.startswith("purged binlogs before "), out
        kept = out.split()[3]
        files = _files(conn)
        assert files[0] == kept, f"the server holds {files}, the command kept {kept}"
        assert "held by zone c partition" in out and any(f"(applied LSN {lsn})" in out for lsn in y.values()), out
        assert file_number(kept) <= file_number(rotated[0]), "c's file survives, though b needs only f3"
        assert set(rotated) <= set(files) and chain_start not in files, "the files before it went"

        # the broker lost the topics: every worker restarts on fresh, empty ones
        first.stop()
        second = Cluster(zones, meta, broker, test_cfg.broker_file, partitions=2)
        clusters.append(second)
        second.start(which=("replicator",), zones=("a",))
        second.start(which=("applier",), zones=("b", "c"))
        insert_tenants(conn, 100, 10)  # c sees the gap after Y in the first of them
        wait_converged(zones, ("tenants",), timeout=60)
        requests, _ = meta.run(
            "SELECT partition_no, from_lsn, status, detail FROM resend_requests "
            "WHERE source_zone = 'a' AND target_zone = 'c' ORDER BY id"
        )
        assert requests, "c asked for the rows after Y again"
        assert all(status == "done" for _, _, status, _ in requests), requests
        assert {int(p): int(lsn) for p, lsn, _, _ in requests} == {p: y[p] for p, _, _, _ in requests}
        assert alerts(meta, "c", "partition_halted") == []
        assert {r[0] for r in checksum(zones["c"])} >= {900_000 + k for k in range(24)}
    finally:
        for cluster in reversed(clusters):
            cluster.stop()
        with conn.cursor() as cur:
            cur.execute("DELETE FROM zonesync_app.tenants WHERE tenant_id >= 900000")
        conn.close()
        reset_state(zones, meta)
