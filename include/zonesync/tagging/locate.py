"""Every row of a locating entity in one zone: the tagged rows from the tag store, and the
rows of forward-rule tables fetched from their parents' keys (seed 004 §3.2.1: 正向查询定位,
S004-09).

A forward rule says a table's rows follow a parent table's: `order_notes` rows belong to
whichever entity holds the `orders` row whose `order_id` their `order_id` names. Rules
may chain (note_replies -> order_notes -> orders); the parent is resolved first. For each
forward table, in that order:

1. the parent's rows of the entity (idx: its unique-key values) are read back for the
   parent columns the rule names (one query per chunk of keys, pushed down by the
   parent's unique key);
2. the child rows whose columns hold those values are read for their own unique key
   (one query per chunk, by the child's columns: the rule's columns should be indexed,
   as any foreign key is).

KV keys (seed 004 §3.2.2) are tagged by the zone's KV tagger in the same store, a KV
repo per repo: `locate_keys` lists them, each with whether the key is still there (a
key that expired leaves its tag behind).

A parent row whose columns are NULL has no children here (NULL matches nothing, as in a
join). The zone's rows are read as they are now: a migration stops the entity's writes
before its final pass (issue 22), so what it reads then is complete.
"""

from __future__ import annotations

import json

from zonesync.sql_names import quote as quote_ident
from zonesync.tagging.extract import idx_text
from zonesync.tagging.rules import TagRules

CHUNK = 1000  # keys per IN list


def forward_order(rules: TagRules, repo: str) -> list:
    """The repo's forward rules, each after the rule of its parent."""
    pending = [r for r in rules.mysql if r.repo == repo and r.forward_table]
    done = {r.table for r in rules.mysql if r.repo == repo and not r.forward_table}
    ordered = []
    while pending:
        ready = [r for r in pending if r.forward_table in done]
        if not ready:  # (rules.py refuses circles and missing parents before they are stored)
            raise ValueError(f"forward rules of {repo} without a resolvable parent: {[r.table for r in pending]}")
        for r in ready:
            ordered.append(r)
            done.add(r.table)
            pending.remove(r)
    return ordered


def locate(conn, store, rules: TagRules, entity_type: str, entity_id: str) -> dict[str, list[str]]:
    """table -> idx of every row of the entity in the zone behind `conn` (the repo's
    database): the tag store's rows (`store`: tag_store.TagStore) and the forward tables'."""
    repo = store.repo
    found = dict(store.rows_of(entity_type, entity_id, limit=10**12))
    for rule in forward_order(rules, repo):
        parent = rules.mysql_rule(repo, rule.forward_table)
        keys = found.get(parent.table, [])
        child_cols = list(rule.forward_columns)
        parent_cols = [rule.forward_columns[c] for c in child_cols]
        values = column_values(conn, repo, parent.table, parent.index_keys, keys, parent_cols)
        rows = keys_where(conn, repo, rule.table, child_cols, values, rule.index_keys)
        if rows:
            found[rule.table] = sorted(rows)
    return {t: found[t] for t in sorted(found) if found[t]}


def locate_keys(connect, kv, rules: TagRules, entity_type: str, entity_id: str) -> dict[str, list[tuple[str, bool]]]:
    """KV repo -> (key, still there) of every key the zone's tag store holds for the entity,
    in each KV repo of the tag rules that the zone's KV store (`kv`:
    runtime.kv_endpoint.KvEndpoint) has; `connect` opens a zone connection."""
    from zonesync.tagging.tag_store import KV_TABLE, TagStore

    out: dict[str, list[tuple[str, bool]]] = {}
    known = {name for name, _ in kv.repos}
    for repo in sorted(set(rules.kv_repos) & known):
        keys = [
            json.loads(k) for k in TagStore(connect, repo).rows_of(entity_type, entity_id, 10**12).get(KV_TABLE, [])
        ]
        if not keys:
            continue
        client = kv.connect(repo)
        try:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.exists(key)
            there = pipe.execute()
        finally:
            client.close()
        out[repo] = [(k, bool(n)) for k, n in zip(keys, there, strict=True)]
    return out


def _in_list(columns: list[str], count: int) -> tuple[str, str]:
    """`(a, b)` and `(%s, %s), (%s, %s)` for `count` rows."""
    cols = ", ".join(quote_ident(c) for c in columns)
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return f"({cols})", ", ".join([one] * count)


def column_values(conn, repo: str, table: str, key_cols, keys: list[str], columns: list[str]) -> set[tuple]:
    """The `columns` of the rows of `table` whose unique key (`key_cols`) is one of `keys`
    (idx texts), rows with a NULL among them left out."""
    out: set[tuple] = set()
    where_cols = list(key_cols)
    select = ", ".join(quote_ident(c) for c in columns)
    for lo in range(0, len(keys), CHUNK):
        part = [json.loads(k) for k in keys[lo : lo + CHUNK]]
        cols, rows = _in_list(where_cols, len(part))
        with conn.cursor() as cur:
            cur.execute(f"SELECT {select} FROM {quote_ident(repo)}.{quote_ident(table)} WHERE {cols} IN ({rows})",
                        tuple(v for values in part for v in values))  # fmt: skip
            out.update(tuple(r) for r in cur.fetchall() if None not in r)
    return out


def keys_where(conn, repo: str, table: str, columns: list[str], values: set[tuple], key_cols) -> set[str]:
    """idx of the rows of `table` whose `columns` hold one of `values`."""
    out: set[str] = set()
    ordered = sorted(values, key=repr)
    select = ", ".join(quote_ident(c) for c in key_cols)
    for lo in range(0, len(ordered), CHUNK):
        part = ordered[lo : lo + CHUNK]
        cols, rows = _in_list(columns, len(part))
        with conn.cursor() as cur:
            cur.execute(f"SELECT {select} FROM {quote_ident(repo)}.{quote_ident(table)} WHERE {cols} IN ({rows})",
                        tuple(v for vals in part for v in vals))  # fmt: skip
            out.update(idx_text(list(r)) for r in cur.fetchall())
    return out
