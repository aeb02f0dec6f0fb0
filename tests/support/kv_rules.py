"""The KV tests' tag rules: tenants' orders rows, and their keys in the sessions repo
(`<env>:session:<tenant>:<token>`, `last_order:<tenant>`); with_chat_cache() adds the
chat_cache repo's `chat:<tenant>:<msg>`."""

from __future__ import annotations

TENANT = {"type": "tenant", "field": "tenant_id"}
DIGITS = {"tenant_id": {"digits": True}}

RULES = {
    "mysql": [{"repo": "zonesync_app", "table": "orders", "index_keys": ["order_id"], "entity": TENANT}],
    "kv": [
        {"repo": "sessions", "pattern": "{{env}}:session:{{tenant_id}}:{{token}}", "entity": TENANT,
         "where": {"env": {"not_contains": ":"}, **DIGITS}},
        {"repo": "sessions", "pattern": "last_order:{{tenant_id}}", "entity": TENANT, "where": DIGITS},
    ],
}  # fmt: skip


def with_chat_cache() -> dict:
    """RULES and a chat_cache repo of the tenants' chat keys."""
    chat = {"repo": "chat_cache", "pattern": "chat:{{tenant_id}}:{{msg}}", "entity": TENANT, "where": DIGITS}
    return {**RULES, "kv": [*RULES["kv"], chat]}
