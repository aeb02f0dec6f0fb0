"""`zonesync rules | meta | guards` as an operator uses them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.rules import BASE, meta_url
from zonesync.meta import db
from zonesync.meta.store import MetaStore

pytestmark = pytest.mark.e2e

ZS = str(Path(sys.executable).parent / "zonesync")


@pytest.fixture
def run(meta):
    env = {**os.environ, "ZONESYNC_META_URL": meta_url(meta)}

    def zs(*args):
        return subprocess.run([ZS, *args], env=env, capture_output=True, text=True, timeout=60)

    return zs


def write(tmp_path, doc, name="rules.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if isinstance(doc, dict) else doc)
    return str(path)


def test_check_apply_show_diff(run, tmp_path, meta):
    first = write(tmp_path, BASE)
    assert run("rules", "check", first).returncode == 0
    applied = run("rules", "apply", first, "--reason", "cli test baseline", "--move-owners")  # from any state
    assert applied.returncode == 0, applied.stderr
    v1 = MetaStore(meta).head()
    moved = {**BASE, "rules": [{"zsids": "0-99", "zone": "b"}, {"zsids": "100-399", "zone": "a"}, *BASE["rules"][1:]]}
    refused = run("rules", "apply", write(tmp_path, moved, "r2.yaml"), "--reason", "move 0-99")
    assert refused.returncode == 2 and "ZSIDs 0-99: a ACTIVE -> b ACTIVE" in refused.stderr
    assert "zone switch" in refused.stderr and MetaStore(meta).head() == v1, "nothing published"
    applied = run("rules", "apply", write(tmp_path, moved, "r2.yaml"), "--reason", "move 0-99", "--move-owners")
    assert applied.returncode == 0, applied.stderr
    v2 = MetaStore(meta).head()
    shown = run("rules", "show")
    assert shown.returncode == 0 and f"# rules version {v2}" in shown.stdout
    assert yaml.safe_load(shown.stdout)["rules"][0] == {"zsids": "0-99", "zone": "b", "status": "ACTIVE"}
    old = run("rules", "show", "--version", str(v1), "--json")
    assert '"zsids": "0-399"' in old.stdout
    diff = run("rules", "diff", str(v1), str(v2))
    assert diff.stdout.strip() == "ZSIDs 0-99: a ACTIVE -> b ACTIVE"
    history = run("rules", "show", "--history")
    assert "move 0-99" in history.stdout and "cli test baseline" in history.stdout


@pytest.mark.parametrize(
    "content, words",
    [
        ("rules: [\n", "not valid YAML at line"),
        (yaml.safe_dump({**BASE, "rules": [{"zsids": "0-1023", "zone": "Zed"}]}), "rules[0].zone"),
        (yaml.safe_dump({**BASE, "rules": [{"zsids": "0-1023", "zone": "q"}]}), "owner zone q is not a known zone"),
        (
            yaml.safe_dump({**BASE, "rules": [{"zsids": "0-500", "zone": "a"}, {"zsids": "400-1023", "zone": "b"}]}),
            "ZSIDs 400-500: covered by more than one rule (zones a, b)",
        ),
        (yaml.safe_dump({**BASE, "rules": [{"zsids": "0-500", "zone": "a"}]}), "ZSIDs 501-1023: no rule covers them"),
    ],
)
def test_bad_rule_files_are_one_line_and_change_nothing(run, tmp_path, meta, content, words):
    head = MetaStore(meta).head()
    path = write(tmp_path, content)
    for args in (("rules", "check", path), ("rules", "apply", path, "--reason", "bad")):
        result = run(*args)
        assert result.returncode == 2, result.stdout
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert MetaStore(meta).head() == head


@pytest.mark.parametrize(
    "content, fix",
    [
        (yaml.safe_dump(BASE).encode() + "# zone a: Zürich\n".encode("latin-1"), "iconv -f latin1 -t utf-8"),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(range(256)), "check that this is the right file"),
    ],
    ids=["latin1", "binary"],
)
def test_files_that_are_not_utf8_are_one_line_and_change_nothing(run, tmp_path, meta, content, fix):
    head = MetaStore(meta).head()
    path = tmp_path / "rules.yaml"
    path.write_bytes(content)
    for args in (("rules", "check", str(path)), ("rules", "apply", str(path), "--reason", "not utf-8")):
        result = run(*args)
        assert result.returncode == 2 and result.stdout == "", result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith(f"zonesync: {path}: ") and "must be UTF-8 text" in lines[0], lines[0]
        assert "at offset " in lines[0] and fix in lines[0], lines[0]
    assert MetaStore(meta).head() == head, "nothing published"


def test_missing_directory_and_empty_files_are_one_line_and_a_bom_is_fine(run, tmp_path, meta):
    head = MetaStore(meta).head()
    empty = tmp_path / "empty.yaml"
    empty.write_bytes(b"")
    for target, words in ((tmp_path / "nope.yaml", "does not exist"), (tmp_path, "is a directory"), (empty, "empty")):
        for args in (("rules", "check", str(target)), ("rules", "apply", str(target), "--reason", "bad")):
            result = run(*args)
            assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
            assert f"zonesync: {target}: " in result.stderr and words in result.stderr, result.stderr
    assert MetaStore(meta).head() == head
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(BASE).encode())
    checked = run("rules", "check", "--offline", str(bom))
    assert checked.returncode == 0 and "OK" in checked.stdout, checked.stderr


def test_apply_requires_a_reason_and_show_unknown_version(run, tmp_path):
    result = run("rules", "apply", write(tmp_path, BASE))
    assert result.returncode == 2 and "--reason" in result.stderr
    missing = run("rules", "show", "--version", "999999")
    assert missing.returncode == 2 and "version 999999 does not exist" in missing.stderr


def test_migrations_are_idempotent_and_resume(meta):
    assert db.migrate(meta) == []  # already current
    with meta.connect().cursor() as cur:  # a migration that crashed before being recorded
        cur.execute("DELETE FROM schema_migrations WHERE version = 1")
    assert db.migrate(meta) == [1]
    assert db.migrate(meta) == []
    assert set(MetaStore(meta).zones()) == {"a", "b", "c"}


def test_unreachable_meta_store_is_one_line(tmp_path):
    env = {**os.environ, "ZONESYNC_META_URL": "mysql://root@127.0.0.1:1/zonesync_meta"}
    result = subprocess.run([ZS, "guards"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unreachable" in result.stderr
    bad = {**env, "ZONESYNC_META_URL": "postgres://x"}
    result = subprocess.run([ZS, "guards"], env=bad, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "ZONESYNC_META_URL must look like" in result.stderr


def test_outside_the_dev_environment_a_missing_address_is_one_line(tmp_path):
    """Production never falls back to the dev environment's addresses (config.dev_selected)."""
    env = {k: v for k, v in os.environ.items() if k != "ZONESYNC_META_URL" and not k.startswith("ZONESYNC_ZONE_")}
    env.update({"ZONESYNC_DEV": "0", "ZONESYNC_STATE_DIR": str(tmp_path / "nowhere")})
    result = subprocess.run([ZS, "guards"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith("zonesync: ZONESYNC_META_URL is not set"), result.stderr
    result = subprocess.run([ZS, "locks", "--zone", "b"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("zonesync: ZONESYNC_ZONE_B_URL is not set") and "Traceback" not in result.stderr


def test_apply_that_times_out_on_acks_says_the_version_is_live_and_who_lags(run, tmp_path, meta):
    """A guard that heartbeats but never takes the version: `rules apply` fails with one
    line saying the version is published and which instance lags (issue 24, item 7)."""
    assert run("rules", "apply", write(tmp_path, BASE), "--reason", "baseline", "--move-owners").returncode == 0
    conn = meta.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO guard_instances (instance_id, zone_id, host, pid, period_ms, version_applied) "
                        "VALUES ('stuck-guard', 1, 'h', 1, 600000, 0)")  # fmt: skip
        conn.commit()
        result = run("rules", "apply", write(tmp_path, BASE), "--reason", "again", "--timeout", "0.5")
        head = MetaStore(meta).head()
        assert result.returncode != 0
        line = result.stderr.strip()
        assert f"version {head} is published and in force" in line and "stuck-guard (zone a, runs v0)" in line
        assert "\n" not in line
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM guard_instances WHERE instance_id = 'stuck-guard'")
        conn.commit()
        conn.close()
