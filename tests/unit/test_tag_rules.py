"""The tag rules document (zonesync/tagging/rules.py): what it accepts, and each fault
refused in one line naming the field and the fix, before anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from zonesync.tagging.rules import TagRulesError, load_file, parse

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tags.yaml"


def _mysql(**changes):
    return {"repo": "app", "table": "orders", "index_keys": ["order_id"],
            "entity": {"type": "tenant", "field": "tenant_id"}, **changes}  # fmt: skip


def test_the_example_loads_and_round_trips():
    tags = load_file(EXAMPLE)
    assert [r.table for r in tags.mysql] == ["tenants", "orders"]
    assert parse(tags.to_doc()).to_doc() == tags.to_doc()
    pattern, tenant = tags.trees()["sessions"].identify("prod:session:42:tok")
    assert (pattern.entity_type, tenant) == ("tenant", "42")


def test_forward_rules_chain_to_a_table_with_an_entity():
    notes = {"repo": "app", "table": "order_notes", "index_keys": ["note_id"],
             "forward": {"table": "orders", "columns": {"order_id": "order_id"}}}  # fmt: skip
    lines = {"repo": "app", "table": "note_lines", "index_keys": ["line_id"],
             "forward": {"table": "order_notes", "columns": {"note_id": "note_id"}}}  # fmt: skip
    tags = parse({"mysql": [_mysql(), notes, lines]})
    assert tags.mysql_rule("app", "note_lines").forward_table == "order_notes"


@pytest.mark.parametrize(
    "doc, words",
    [({"mysql": [_mysql(table="bad name")]}, "mysql[0].table: a table must be a plain name"),
     ({"mysql": [_mysql(index_keys=[])]}, "mysql[0].index_keys: list the columns of a unique key"),
     ({"mysql": [{k: v for k, v in _mysql().items() if k != "entity"}]}, "mysql[0]: give either entity"),
     ({"mysql": [_mysql(forward={"table": "x", "columns": {"a": "a"}})]}, "mysql[0]: give either entity"),
     ({"mysql": [_mysql(), _mysql()]}, "mysql[1]: app.orders has a rule already"),
     ({"mysql": [{"repo": "app", "table": "n", "index_keys": ["id"],
                  "forward": {"table": "missing", "columns": {"o": "o"}}}]},
      "mysql[0].forward.table: missing has no rule in repo app: register the parent table too"),
     ({"mysql": [{"repo": "app", "table": t, "index_keys": ["id"], "forward": {"table": parent, "columns": {"a": "a"}}}
                 for t, parent in (("p", "q"), ("q", "p"))]},
      "go round in a circle"),
     ({"mysql": [_mysql(colour="red")]}, "mysql[0].colour: unknown field"),
     ({"kv": [{"repo": "r", "pattern": "k:{{id}}", "entity": {"type": "t", "field": "other"}}]},
      "entity field 'other' is not a variable"),
     ({"kv": [{"repo": "r", "pattern": "k:{{id}}", "entity": {"type": "t", "field": "id"},
               "where": {"id": {"length": "six"}}}]}, "kv[0].pattern where.id.length: a whole number"),
     ({"kv": [{"repo": "r", "pattern": "{{a}}:{{id}}", "entity": {"type": "t", "field": "id"}},
              {"repo": "r", "pattern": "{{b}}:x:{{id}}", "entity": {"type": "t", "field": "id"}}]},
      "kv[1].pattern: '{{b}}:x:{{id}}' and kv[0]'s '{{a}}:{{id}}' in repo r: both match"),
     ({"mysql": "orders"}, "mysql: a list of rules"),
     ([], "(top level): give a mapping")],
)  # fmt: skip
def test_a_bad_document_is_refused_naming_the_field(doc, words):
    with pytest.raises(TagRulesError) as refused:
        parse(doc)
    assert words in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_the_same_patterns_in_two_repos_do_not_clash_and_constraints_part_them_in_one():
    kv = [{"repo": repo, "pattern": "{{a}}:{{id}}", "entity": {"type": "t", "field": "id"}} for repo in ("r1", "r2")]
    assert len(parse({"kv": kv}).kv) == 2
    parted = [{"repo": "r", "pattern": "{{a}}:{{id}}", "entity": {"type": "t", "field": "id"},
               "where": {"a": {"not_contains": ":"}, "id": {"digits": True}}},
              {"repo": "r", "pattern": "{{b}}:x:{{id}}", "entity": {"type": "t", "field": "id"},
               "where": {"b": {"not_contains": ":"}}}]  # fmt: skip
    assert len(parse({"kv": parted}).kv) == 2


def test_a_file_that_is_not_yaml_or_empty_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "tags.yaml"
    bad.write_text("kv: [\n")
    with pytest.raises(TagRulesError, match="not valid YAML at line"):
        load_file(bad)
    bad.write_text("# nothing\n")
    with pytest.raises(TagRulesError, match="the file is empty"):
        load_file(bad)
