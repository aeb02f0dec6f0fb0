"""`zonesync switch` as a user runs it: the full stack, the real Airflow scheduler and
triggerer, the REST API; `switch status` and `switches` read the history in meta."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from zonesync.dal import Guard, ZoneDB
from zonesync.dev import env as dev_env
from zonesync.dev.stack import full_stack
from zonesync.meta.store import MetaStore
from zonesync.rules.extract import RuleIndex

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ZONESYNC = str(Path(sys.executable).parent / "zonesync")


def zs(env, *args, timeout=300):
    return subprocess.run([ZONESYNC, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_switch_status_and_history_from_the_command_line(tmp_path):
    with full_stack(tmp_path / "stack") as (cfg, env, _api):
        meta = dev_env.meta_config(cfg)
        ports = {z.name: z.port for z in cfg.zones}
        guards = [Guard(meta, z, ZoneDB("127.0.0.1", ports[z], "root", "", "zonesync_app"), period=0.5).start()
                  for z in ("a", "b")]  # fmt: skip
        try:
            with guards[0].transaction() as tx:
                tx.insert("tenants", {"tenant_id": 42, "name": "moves to b"})
            done = zs(env, "switch", "--zsids", "0-99", "--from", "a", "--to", "b", "--reason", "e2e move")
            assert done.returncode == 0, done.stdout + done.stderr
            for step in ("preflight", "record_state", "block", "reshard", "wait_sync", "activate", "verify"):
                assert f"  {step}" in done.stdout, done.stdout
            assert "succeeded" in done.stdout and "write-blocked window" in done.stdout
            run_id = done.stdout.split()[1].rstrip(":")
            rule = RuleIndex(MetaStore(meta).rules_at()[1]).rule_for(42)
            assert (rule.zone, rule.status) == ("b", "ACTIVE")
            with guards[1].transaction() as tx:  # b owns tenant 42 now, with a's row
                assert tx.update("tenants", {"tenant_id": 42}, {"name": "written in b"}) == 1

            status = zs(env, "switch", "status", run_id)
            assert status.returncode == 0 and "succeeded" in status.stdout and "sync position P" in status.stdout
            assert "wait_sync" in status.stdout and "activate" in status.stdout
            # the real scheduler started the window's tasks with block: each passed its gate
            assert re.search(r"gate waits: .*activate \d+\.\d\d s", status.stdout), status.stdout

            # the same ZSIDs again from a: preflight refuses (b owns them), rollback has nothing to undo
            again = zs(env, "switch", "--zsids", "0-99", "--from", "a", "--to", "b", "--reason", "twice")
            assert again.returncode == 1, again.stdout + again.stderr
            assert "failed" in again.stdout and "ACTIVE in from_zone" in again.stdout
            assert RuleIndex(MetaStore(meta).rules_at()[1]).rule_for(42).zone == "b"

            history = zs(env, "switches")
            assert history.returncode == 0 and run_id in history.stdout and "e2e move" in history.stdout
            assert "succeeded" in history.stdout and "failed" in history.stdout

            bad = zs(env, "switch", "--zsids", "0-99", "--from", "a", "--to", "a", "--reason", "x")
            assert bad.returncode == 2 and "--to" in bad.stderr
        finally:
            for g in guards:
                g.close()
