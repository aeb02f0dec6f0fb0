"""Process supervision: stale pid files are never mistaken for live components."""

from __future__ import annotations

import json
import os
import sys

import pytest

from zonesync.dev import procs

pytestmark = pytest.mark.unit


def test_pid_file_of_a_reused_pid_is_stale(tmp_path):
    # Our own pid is alive but is not the component the file names.
    (tmp_path / "zone-a.json").write_text(json.dumps({"pid": os.getpid(), "marker": "--datadir=/x/zone-a"}))
    managed = procs.read(tmp_path, "zone-a")
    assert managed is not None and not managed.alive()
    assert procs.stop(tmp_path, "zone-a") is False  # never signalled
    assert not (tmp_path / "zone-a.json").exists()


def test_garbage_pid_file_reads_as_nothing(tmp_path):
    (tmp_path / "broker.json").write_text("{oops")
    assert procs.read(tmp_path, "broker") is None


def test_stop_takes_the_whole_process_group(tmp_path):
    # A parent that forks a child which ignores its parent's death: both must go.
    script = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    managed = procs.spawn(tmp_path, tmp_path, "fam", [sys.executable, "-c", script], "import subprocess")
    assert procs.wait_until(lambda: len(procs._group_members(managed.pid)) == 2, 10)
    assert procs.stop(tmp_path, "fam", timeout=5) is True
    assert procs._group_members(managed.pid) == []


def test_marker_alternatives_match_retitled_processes(tmp_path):
    managed = procs.spawn(tmp_path, tmp_path, "s", ["sleep", "30"], "nothing-like-it|sleep 30")
    try:
        # Right after fork/exec the kernel may still show the parent's command line.
        assert procs.wait_until(lambda: procs.pid_matches(managed.pid, managed.marker), 5, 0.01)
        assert not procs.pid_matches(managed.pid, "airflow scheduler")
    finally:
        procs.stop(tmp_path, "s")


def test_port_helpers():
    port = procs.free_port()
    assert procs.port_free(port)
    # below the kernel's ephemeral range: not handed to a connection between pick and bind
    assert port < procs._ephemeral_low() and procs.free_port_block(6) + 6 <= procs._ephemeral_low()
    with pytest.raises(procs.PortInUse, match="ZONESYNC_X"):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()
            procs.require_free_port(port, "thing", "ZONESYNC_X")


def test_dev_processes_write_private_files_in_a_private_state_dir(tmp_path):
    """What a dev env's processes write (logs, Airflow's password file) is 0600 and the
    state dir 0700, even where it existed wider (issue: world-readable secrets)."""
    import stat

    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    procs.private_dir(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    m = procs.spawn(state / "run", state / "logs", "writer", ["sh", "-c", f"echo secret > {state}/made"], "sh")
    m.proc.wait(10)
    assert stat.S_IMODE((state / "made").stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "logs" / "writer.log").stat().st_mode) == 0o600
