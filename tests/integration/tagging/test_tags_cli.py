"""`zonesync tags check | apply | show | diff` against the test meta store: tag rules are
checked before they are stored, versioned like the ZSID rules, audited, and a bad file
changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from zonesync import cli
from zonesync.meta.store import MetaStore

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tags.yaml"


def test_check_apply_show_diff(meta, zones, tmp_path, capsys):
    store = MetaStore(meta)
    assert cli.main(["tags", "check", str(EXAMPLE)]) == 0
    assert "OK: 2 MySQL table(s)" in capsys.readouterr().out
    assert cli.main(["tags", "apply", str(EXAMPLE), "--reason", "test: sample tags"]) == 0
    version, tags = store.tags_at()
    assert f"published tag rules version {version}" in capsys.readouterr().out
    assert [p.text for p in tags.kv] == ["{{env}}:session:{{tenant_id}}:{{token}}", "last_order:{{tenant_id}}"]
    rows, _ = meta.run("SELECT action, version FROM audit_log WHERE action = 'tags.publish' ORDER BY id DESC LIMIT 1")
    assert rows[0][1] == version

    assert cli.main(["tags", "show", "--json"]) == 0
    shown = capsys.readouterr().out
    assert json.loads(shown[shown.index("\n") + 1 :]) == tags.to_doc()

    changed = yaml.safe_load(EXAMPLE.read_text())
    changed["mysql"] = changed["mysql"][:1]
    changed["kv"][1]["where"]["tenant_id"]["length"] = 4
    new = tmp_path / "tags.yaml"
    new.write_text(yaml.safe_dump(changed))
    assert cli.main(["tags", "diff", str(new)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "- mysql zonesync_app.orders" in lines
    assert any(line.startswith("~ kv sessions last_order:{{tenant_id}}") and '"length": 4' in line for line in lines)


def test_a_bad_file_is_refused_in_one_line_and_nothing_is_stored(meta, zones, tmp_path, capsys):
    before = MetaStore(meta).head()
    bad = tmp_path / "tags.yaml"
    bad.write_text('kv:\n  - repo: r\n    pattern: "{{a}}_{{b}}"\n    entity: {type: t, field: b}\n'
                   '  - repo: r\n    pattern: "{{a}}_{{b}}_{{c}}"\n    entity: {type: t, field: c}\n')  # fmt: skip
    assert cli.main(["tags", "apply", str(bad), "--reason", "test"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "both match 'x_x_x': add a constraint (where:)" in err
    assert MetaStore(meta).head() == before
