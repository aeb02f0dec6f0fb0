"""Tag rules (seed 004 §3.2): which MySQL rows and which KV keys belong to which locating
entity. One document (YAML on disk, JSON in meta, versioned like the ZSID rules):

    mysql:
      - repo: zonesync_app          # database
        table: orders
        index_keys: [order_id]      # a unique key: how a migration fetches the row later
        entity: {type: tenant, field: tenant_id}
        replace_pk: false           # the target assigns a new AUTO_INCREMENT id
      - repo: zonesync_app          # a row that cannot be walked up to its entity (S004-09):
        table: order_notes          # fetched from its parent's key by a forward query
        index_keys: [note_id]
        forward: {table: orders, columns: {order_id: order_id}}   # child column: parent column
    kv:
      - repo: chat_cache
        pattern: "{{env}}:chat_last_msg_id:{{message_id}}"
        entity: {type: message, field: message_id}
        where: {message_id: {digits: true}, env: {not_contains: ":"}}

Checked before anything is stored: every name a plain name, every field present, a
forward rule's parent registered with an entity (forward rules may chain, never in a
circle), each KV pattern well formed (kv_patterns.py) and no two patterns of one repo
able to match the same key (overlap.py, which names a key both match). Each error is one
line naming the field (`kv[2].where.message_id.length: ...`) and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from zonesync.sql_names import is_ident
from zonesync.tagging.kv_patterns import KvPattern, PatternError
from zonesync.tagging.kv_patterns import parse as parse_pattern
from zonesync.tagging.overlap import OverlapIndex
from zonesync.tagging.radix import PatternTree
from zonesync.user_files import UserFileError, read_user_text


class TagRulesError(ValueError):
    """The document is malformed: `problems` lists 'path: message' lines."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: " + "; ".join(problems))


@dataclass(frozen=True)
class MysqlRule:
    repo: str
    table: str
    index_keys: tuple[str, ...]
    entity_type: str = ""
    entity_field: str = ""
    replace_pk: bool = False
    forward_table: str = ""  # the parent a forward rule fetches from
    forward_columns: dict = field(default_factory=dict, compare=False, hash=False)  # child column -> parent's


@dataclass(frozen=True)
class TagRules:
    mysql: tuple[MysqlRule, ...] = ()
    kv: tuple[KvPattern, ...] = ()
    kv_repos: dict = field(default_factory=dict, compare=False, hash=False)  # repo -> [KvPattern]

    def mysql_rule(self, repo: str, table: str) -> MysqlRule | None:
        return next((r for r in self.mysql if (r.repo, r.table) == (repo, table)), None)

    def by_table(self, repo: str) -> dict[str, MysqlRule]:
        """The tagged tables of `repo` (an entity field: forward-rule tables get no tag)."""
        return {r.table: r for r in self.mysql if r.repo == repo and not r.forward_table}

    def trees(self) -> dict[str, PatternTree]:
        """One radix tree per KV repo."""
        return {repo: PatternTree(patterns) for repo, patterns in self.kv_repos.items()}

    def to_doc(self) -> dict:
        mysql = []
        for r in self.mysql:
            doc: dict = {"repo": r.repo, "table": r.table, "index_keys": list(r.index_keys)}
            if r.forward_table:
                doc["forward"] = {"table": r.forward_table, "columns": dict(r.forward_columns)}
            else:
                doc["entity"] = {"type": r.entity_type, "field": r.entity_field}
            if r.replace_pk:
                doc["replace_pk"] = True
            mysql.append(doc)
        kv = []
        for repo, patterns in sorted(self.kv_repos.items()):
            for p in patterns:
                doc = {"repo": repo, "pattern": p.text, "entity": {"type": p.entity_type, "field": p.entity_field}}
                if p.where:
                    doc["where"] = p.where
                kv.append(doc)
        return {"mysql": mysql, "kv": kv}


def _name(value, where: str, what: str, problems: list[str]) -> str:
    if not is_ident(value):
        problems.append(f"{where}: {what} must be a plain name (letters, digits, _), got {value!r}")
        return ""
    return value


def _mapping(doc, where: str, problems: list[str], required: tuple, optional: tuple = ()) -> dict | None:
    if not isinstance(doc, dict):
        problems.append(f"{where}: give a mapping with {', '.join(required)}")
        return None
    for key in required:
        if key not in doc:
            problems.append(f"{where}.{key}: missing")
    for key in sorted(set(doc) - set(required) - set(optional)):
        problems.append(f"{where}.{key}: unknown field (fields: {', '.join((*required, *optional))})")
    return doc


def _entity(doc, where: str, problems: list[str]) -> tuple[str, str]:
    if _mapping(doc, where, problems, ("type", "field")) is None or not {"type", "field"} <= set(doc):
        return "", ""
    return _name(doc["type"], f"{where}.type", "an entity type", problems), doc["field"]


def _mysql(i: int, doc, problems: list[str]) -> MysqlRule | None:
    where = f"mysql[{i}]"
    if _mapping(doc, where, problems, ("repo", "table", "index_keys"), ("entity", "forward", "replace_pk")) is None:
        return None
    repo = _name(doc.get("repo"), f"{where}.repo", "a database", problems)
    table = _name(doc.get("table"), f"{where}.table", "a table", problems)
    keys = doc.get("index_keys")
    if not isinstance(keys, list) or not keys:
        problems.append(f"{where}.index_keys: list the columns of a unique key, e.g. [order_id]")
        keys = []
    keys = [_name(k, f"{where}.index_keys", "a column", problems) for k in keys]
    replace_pk = doc.get("replace_pk", False)
    if not isinstance(replace_pk, bool):
        problems.append(f"{where}.replace_pk: write true or false")
    if ("entity" in doc) == ("forward" in doc):
        problems.append(f"{where}: give either entity (the row names its entity) or forward (fetched from a parent)")
        return None
    if "entity" in doc:
        etype, efield = _entity(doc["entity"], f"{where}.entity", problems)
        _name(efield, f"{where}.entity.field", "a column", problems)
        return MysqlRule(repo, table, tuple(keys), etype, efield, replace_pk is True)
    fwd = _mapping(doc["forward"], f"{where}.forward", problems, ("table", "columns"))
    if fwd is None or not {"table", "columns"} <= set(fwd):
        return None
    columns = fwd["columns"]
    if not isinstance(columns, dict) or not columns:
        problems.append(f"{where}.forward.columns: map child columns to the parent's, e.g. {{order_id: order_id}}")
        columns = {}
    for child, parent in columns.items():
        _name(child, f"{where}.forward.columns", "a column", problems)
        _name(parent, f"{where}.forward.columns.{child}", "a column", problems)
    parent_table = _name(fwd["table"], f"{where}.forward.table", "a table", problems)
    return MysqlRule(repo, table, tuple(keys), replace_pk=replace_pk is True, forward_table=parent_table,
                     forward_columns=dict(columns))  # fmt: skip


def _kv(i: int, doc, problems: list[str]) -> tuple[str, KvPattern] | None:
    where = f"kv[{i}]"
    if _mapping(doc, where, problems, ("repo", "pattern", "entity"), ("where",)) is None:
        return None
    repo = _name(doc.get("repo"), f"{where}.repo", "a repo", problems)
    etype, efield = _entity(doc.get("entity"), f"{where}.entity", problems)
    constraints = doc.get("where") or {}
    if not isinstance(constraints, dict):
        problems.append(f"{where}.where: map variables to their constraints")
        return None
    try:
        return repo, parse_pattern(doc.get("pattern"), constraints, etype, efield, at=f"{where}.pattern")
    except PatternError as exc:
        problems.append(str(exc))
        return None


def _check_forward(rules: list[MysqlRule], problems: list[str]) -> None:
    by_table = {(r.repo, r.table): r for r in rules}
    for i, r in enumerate(rules):
        seen, cur = {(r.repo, r.table)}, r
        while cur.forward_table:
            parent = by_table.get((cur.repo, cur.forward_table))
            if parent is None:
                problems.append(f"mysql[{i}].forward.table: {cur.forward_table} has no rule in repo {cur.repo}: "
                                "register the parent table too")  # fmt: skip
                break
            if (parent.repo, parent.table) in seen:
                problems.append(f"mysql[{i}].forward: the forward rules of {r.table} go round in a circle")
                break
            seen.add((parent.repo, parent.table))
            cur = parent


def parse(doc: object, source: str = "tag rules") -> TagRules:
    """Validate a tag rules document and build TagRules, or raise TagRulesError."""
    problems: list[str] = []
    if _mapping(doc, "(top level)", problems, (), ("mysql", "kv")) is None:
        raise TagRulesError(source, problems)
    assert isinstance(doc, dict)
    mysql, kv_repos, lists = [], {}, {}
    for key in ("mysql", "kv"):
        lists[key] = doc.get(key) or []
        if not isinstance(lists[key], list):
            problems.append(f"{key}: a list of rules")
            lists[key] = []
    for i, item in enumerate(lists["mysql"]):
        rule = _mysql(i, item, problems)
        if rule is not None:
            if any((r.repo, r.table) == (rule.repo, rule.table) for r in mysql):
                problems.append(f"mysql[{i}]: {rule.repo}.{rule.table} has a rule already: one rule per table")
            mysql.append(rule)
    _check_forward(mysql, problems)
    positions: dict[int, int] = {}
    indexes: dict[str, OverlapIndex] = {}
    for i, item in enumerate(lists["kv"]):
        found = _kv(i, item, problems)
        if found is None:
            continue
        repo, pattern = found
        index = indexes.setdefault(repo, OverlapIndex())
        for other, key in index.conflicts(pattern):
            shown = f"both match {key!r}" if key else "they are too complex to tell apart"
            problems.append(f"kv[{i}].pattern: {pattern.text!r} and kv[{positions[id(other)]}]'s {other.text!r} "
                            f"in repo {repo}: {shown}: add a constraint (where:) that tells them apart")  # fmt: skip
        index.add(pattern)
        kv_repos.setdefault(repo, []).append(pattern)
        positions[id(pattern)] = i
    if problems:
        raise TagRulesError(source, problems)
    return TagRules(tuple(mysql), tuple(p for ps in kv_repos.values() for p in ps), kv_repos)


def load_file(path: str | Path) -> TagRules:
    """A tag rules file (UTF-8 YAML), or TagRulesError naming the file and the fault."""
    path = Path(path)
    try:
        text = read_user_text(path, "tag rules file")
    except UserFileError as exc:
        raise TagRulesError(str(path), [exc.problem]) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise TagRulesError(str(path), [f"not valid YAML at {at}: {getattr(exc, 'problem', exc)}"]) from None
    if doc is None:
        raise TagRulesError(str(path), ["the file is empty: write mysql: and/or kv: rules (examples/tags.yaml)"])
    return parse(doc, str(path))
