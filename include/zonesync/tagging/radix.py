"""A repo's KV patterns in one compressed trie (seed 004 §3.2.2: 根据 Repo 的纬度构建压缩字典树
radix_tree，然后通过 key 来匹配): a key is matched against every pattern at once.

Literal text lives on compressed edges (one edge per run of text no two patterns part
on); a variable is a node of its own, shared by the patterns that reach it with the same
constraints. Matching walks the key once along literal edges; at a variable it tries
each place the variable could end (one place with a length, the digits' run with
`digits`, else every place where what follows can start), so unlike a regex it finds
every pattern the key matches, with the variables of each. A key that matches two
patterns is reported by the caller (tagger), never tagged by one of them at random; the
registration check (overlap.py) keeps that from happening for any key it can foresee.
"""

from __future__ import annotations

from zonesync.tagging.kv_patterns import KvPattern, Var

MAX_MATCHES = 64  # ways one key may match before the walk stops looking (it is ambiguous anyway)


class _Node:
    __slots__ = ("edges", "ends", "vars")

    def __init__(self):
        self.edges: dict[str, tuple[str, _Node]] = {}  # first char -> (edge text, child)
        self.vars: list[tuple[Var, _Node]] = []
        self.ends: list[KvPattern] = []  # patterns that end here

    def starts(self) -> set[str] | None:
        """The characters what follows this node can start with (None: anything, a variable)."""
        return None if self.vars else set(self.edges)


class PatternTree:
    """The patterns of one repo."""

    def __init__(self, patterns=()):
        self.root = _Node()
        self.patterns: list[KvPattern] = []
        for p in patterns:
            self.add(p)

    def add(self, pattern: KvPattern) -> None:
        node = self.root
        for token in pattern.tokens:
            node = self._literal(node, token) if isinstance(token, str) else self._variable(node, token[1])
        node.ends.append(pattern)
        self.patterns.append(pattern)

    @staticmethod
    def _variable(node: _Node, var: Var) -> _Node:
        for existing, child in node.vars:
            if existing == var:
                return child
        child = _Node()
        node.vars.append((var, child))
        return child

    @staticmethod
    def _literal(node: _Node, text: str) -> _Node:
        while text:
            found = node.edges.get(text[0])
            if found is None:
                child = _Node()
                node.edges[text[0]] = (text, child)
                return child
            edge, child = found
            common = 0
            while common < min(len(edge), len(text)) and edge[common] == text[common]:
                common += 1
            if common < len(edge):  # split the edge where the texts part
                middle = _Node()
                middle.edges[edge[common]] = (edge[common:], child)
                node.edges[text[0]] = (edge[:common], middle)
                child = middle
            node, text = child, text[common:]
        return node

    def match(self, key: str) -> list[tuple[KvPattern, dict[str, str]]]:
        """Every way `key` matches a pattern: (pattern, its variables' values), each split
        of the key once (at most MAX_MATCHES)."""
        found: list[tuple[KvPattern, dict[str, str]]] = []
        self._walk(self.root, key, 0, [], found)
        return found

    def identify(self, key: str) -> tuple[KvPattern, str] | None:
        """(pattern, entity id) of `key`, None when no pattern matches, AmbiguousKey when
        the matches disagree on the pattern or on the entity id (seed 004: reported, never
        tagged arbitrarily). Splits that agree on both are one answer."""
        answers = {(id(p), values[p.entity_field]): (p, values[p.entity_field]) for p, values in self.match(key)}
        if len(answers) > 1:
            raise AmbiguousKey(key, [p.text for p, _ in answers.values()])
        return next(iter(answers.values()), None)

    def _walk(self, node: _Node, key: str, pos: int, values: list[str], found: list) -> None:
        if len(found) >= MAX_MATCHES:
            return
        if pos == len(key):
            found.extend((p, dict(zip(p.variables, values, strict=True))) for p in node.ends)
        if pos < len(key):
            edge = node.edges.get(key[pos])
            if edge is not None and key.startswith(edge[0], pos):
                self._walk(edge[1], key, pos + len(edge[0]), values, found)
        for var, child in node.vars:
            for end in _ends(var, child, key, pos):
                value = key[pos:end]
                if var.accepts(value):
                    self._walk(child, key, end, [*values, value], found)


class AmbiguousKey(ValueError):
    def __init__(self, key: str, patterns: list[str]):
        self.key, self.patterns = key, patterns
        super().__init__(f"key {key!r} matches {len(patterns)} ways ({', '.join(sorted(set(patterns)))}): "
                         "not tagged; add a constraint that tells them apart")  # fmt: skip


def _ends(var: Var, child: _Node, key: str, pos: int):
    """Where a variable starting at `pos` may end: past at least one character, where what
    follows it can begin."""
    n = len(key)
    if var.length is not None:
        return (pos + var.length,) if pos + var.length <= n else ()
    last = n
    if var.digits:
        last = pos
        while last < n and "0" <= key[last] <= "9":
            last += 1
    starts = child.starts()
    ends = range(pos + 1, last + 1)
    if starts is None:
        return ends
    return [e for e in ends if (e == n and child.ends) or (e < n and key[e] in starts)]
