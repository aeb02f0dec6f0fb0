"""Rule documents for tests: the baseline split of 1024 ZSIDs over zones a, b, c."""

from __future__ import annotations

import copy

from zonesync.rules import parse

BASE = {
    "zsid_space": {"min": 0, "max": 1023},
    "txn_deadline_ms": 2000,
    "rules": [
        {"zsids": "0-399", "zone": "a"},
        {"zsids": "400-799", "zone": "b"},
        {"zsids": "800-1023", "zone": "c"},
    ],
    "tables": {
        "tenants": {"column": "tenant_id", "function": "modulo", "buckets": 1024},
        "orders": {
            "column": "tenant_id",
            "function": "modulo",
            "buckets": 1024,
            "entity": {"type": "tenant", "column": "tenant_id"},
        },
    },
}


def rules_doc(rules=None, **changes):
    doc = copy.deepcopy(BASE)
    if rules is not None:
        doc["rules"] = rules
    doc.update(changes)
    return parse(doc)


def meta_url(meta) -> str:
    """The meta store as ZONESYNC_META_URL, for subprocesses."""
    return f"mysql://{meta.user}@{meta.host}:{meta.port}/{meta.database}"
