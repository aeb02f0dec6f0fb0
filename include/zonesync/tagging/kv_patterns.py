"""KV key patterns (seed 004 §3.2.2): `{{env}}:chat_last_msg_id:{{message_id}}`.

A pattern is literal text and `{{variables}}`. A variable stands for one or more
characters (any characters, separators included: `{{rec_id}}` in `{{table_id}}_{{rec_id}}`
takes `abc_1` whole), narrowed by its constraints:

    digits        only 0-9
    length        exactly this many characters
    contains      holds this text somewhere
    not_contains  never holds this text

Two patterns of one repo may match the same key (the seed's `{{table_id}}_{{rev}}_{{rec_id}}`
and `{{table_id}}_{{rev}}_{{rec_id}}_{{level}}` both match `tableStr_1000_abccc_1`):
overlap.py refuses to register such a pair until a constraint tells them apart, and
radix.py reports a key that still matches two patterns instead of picking one.

Two variables side by side (`{{a}}{{b}}`) have no place where one ends unless the first
has a fixed length: anything else is refused when the pattern is parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from zonesync.sql_names import is_ident

_TOKEN = re.compile(r"\{\{(.*?)\}\}")
CONSTRAINTS = ("digits", "length", "contains", "not_contains")


class PatternError(ValueError):
    """A pattern or its constraints are malformed: one line naming what and how to fix it."""


@dataclass(frozen=True)
class Var:
    """A variable's constraints (its name is the pattern's business: patterns that share a
    prefix share its variable nodes when their constraints are the same)."""

    digits: bool = False
    length: int | None = None
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()

    def accepts(self, value: str) -> bool:
        if not value or (self.length is not None and len(value) != self.length):
            return False
        if self.digits and not (value.isascii() and value.isdigit()):
            return False
        return all(s in value for s in self.contains) and not any(s in value for s in self.not_contains)

    def regex(self) -> str:
        """Its characters and count as a regular expression (contains / not_contains are
        checked on the captured value: see KvPattern.regex_match)."""
        return ("[0-9]" if self.digits else ".") + (f"{{{self.length}}}" if self.length is not None else "+")


@dataclass(frozen=True)
class KvPattern:
    """One registered pattern: its text, its tokens (str for literal text, (name, Var) for
    a variable) and what it tags."""

    text: str
    tokens: tuple
    entity_type: str = ""
    entity_field: str = ""
    where: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def variables(self) -> list[str]:
        return [t[0] for t in self.tokens if not isinstance(t, str)]

    def regex(self) -> re.Pattern:
        """The pattern as one anchored regular expression, a named group per variable: the
        baseline a radix tree is measured against (one regex per pattern, tried in turn)."""
        parts = [re.escape(t) if isinstance(t, str) else f"(?P<{t[0]}>{t[1].regex()})" for t in self.tokens]
        return re.compile("".join(parts) + r"\Z", re.S)

    def regex_match(self, compiled: re.Pattern, key: str) -> dict | None:
        """`key`'s variables by `compiled` (this pattern's regex), constraints checked, or None.
        A regex tries one split of the key; radix.py tries every split."""
        m = compiled.match(key)
        if m is None:
            return None
        values = m.groupdict()
        ok = all(var.accepts(values[name]) for name, var in (t for t in self.tokens if not isinstance(t, str)))
        return values if ok else None


def _var(name: str, spec: object, where: str) -> Var:
    if spec is None:
        return Var()
    if not isinstance(spec, dict):
        raise PatternError(f"{where}: give a mapping of constraints ({', '.join(CONSTRAINTS)})")
    unknown = sorted(set(spec) - set(CONSTRAINTS))
    if unknown:
        raise PatternError(f"{where}.{unknown[0]}: not a constraint: use {', '.join(CONSTRAINTS)}")
    digits, length = spec.get("digits", False), spec.get("length")
    if not isinstance(digits, bool):
        raise PatternError(f"{where}.digits: write true or false")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
        raise PatternError(f"{where}.length: a whole number of characters, at least 1")
    texts = {}
    for key in ("contains", "not_contains"):
        value = spec.get(key, ())
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list | tuple) or not all(isinstance(s, str) and s for s in value):
            raise PatternError(f"{where}.{key}: a non-empty text, or a list of them")
        texts[key] = tuple(value)
    var = Var(digits, length, texts["contains"], texts["not_contains"])
    if set(var.contains) & set(var.not_contains):
        raise PatternError(f"{where}: {name} cannot both contain and not contain the same text")
    return var


def parse(text: str, where: dict | None = None, entity_type: str = "", entity_field: str = "",
          at: str = "pattern") -> KvPattern:  # fmt: skip
    """A KvPattern from `text` and the constraints of its variables (`where`: name ->
    {digits, length, contains, not_contains}), or PatternError naming the fault."""
    if not isinstance(text, str) or not text:
        raise PatternError(f"{at}: write the key's format, e.g. '{{{{env}}}}:chat_last_msg_id:{{{{message_id}}}}'")
    where = dict(where or {})
    tokens: list = []
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() > pos:
            tokens.append(text[pos : m.start()])
        name = m.group(1).strip()
        if not is_ident(name):
            raise PatternError(f"{at}: variable {{{{{m.group(1)}}}}} needs a plain name (letters, digits, _)")
        if name in [t[0] for t in tokens if not isinstance(t, str)]:
            raise PatternError(f"{at}: variable {name} appears twice: give each place its own name")
        tokens.append((name, _var(name, where.get(name), f"{at} where.{name}")))
        pos = m.end()
    if pos < len(text):
        tokens.append(text[pos:])
    if "{{" in "".join(t for t in tokens if isinstance(t, str)) or "}}" in text[pos:]:
        raise PatternError(f"{at}: an unclosed or stray '{{{{' or '}}}}' in {text!r}")
    names = [t[0] for t in tokens if not isinstance(t, str)]
    if not names:
        raise PatternError(f"{at}: {text!r} has no {{{{variable}}}}: a key with no entity id in it tags nothing")
    for a, b in zip(tokens, tokens[1:], strict=False):
        if not isinstance(a, str) and not isinstance(b, str) and a[1].length is None:
            raise PatternError(f"{at}: {{{{{a[0]}}}}}{{{{{b[0]}}}}} has no text between them: put a separator "
                               f"there, or give {a[0]} a length")  # fmt: skip
    stray = sorted(set(where) - set(names))
    if stray:
        raise PatternError(f"{at} where.{stray[0]}: no such variable in {text!r} (it has {', '.join(names)})")
    if entity_field and entity_field not in names:
        raise PatternError(f"{at}: entity field {entity_field!r} is not a variable of {text!r} "
                           f"(it has {', '.join(names)})")  # fmt: skip
    return KvPattern(text, tuple(tokens), entity_type, entity_field, where)
