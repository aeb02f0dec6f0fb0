"""Zone-sharding rules: the rule set model, the rule check, ZSID extraction."""

from zonesync.rules.check import RuleCheckError, check
from zonesync.rules.extract import RuleIndex, ZsidUnknown
from zonesync.rules.model import ACTIVE, BLOCK, RESHARDING, Rule, RuleSet, RuleSetError, load_file, parse

__all__ = [
    "ACTIVE",
    "BLOCK",
    "RESHARDING",
    "Rule",
    "RuleCheckError",
    "RuleIndex",
    "RuleSet",
    "RuleSetError",
    "ZsidUnknown",
    "check",
    "load_file",
    "parse",
]
