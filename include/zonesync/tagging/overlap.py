"""Can two KV patterns match the same key? (seed 004 S004-08: registering two patterns
that no constraint tells apart is refused.)

Each pattern, constraints included, is a regular language, so the question is whether
two finite automata accept a common word: a breadth-first search over pairs of their
states, from both starts to both accepting, whose path is the shortest key both match
(the witness the refusal shows). A pattern's automaton (an NFA) is where it is in its
tokens: an offset into a literal, or inside a variable with what the variable's
constraints still need to know (characters so far, capped at its length or at 1; for
each `contains` and `not_contains` text, how much of it the last characters spell, as
KMP does). A variable may end after any character that leaves it acceptable.

Characters matter only through what the two patterns say about them, so the search
tries one representative of each kind: every character either pattern writes, one digit
none writes and one non-digit none writes.
"""

from __future__ import annotations

import bisect
from collections import deque

from zonesync.tagging.kv_patterns import KvPattern, Var

_OTHERS = "xyzqXYZQ#@~!§¤"


def _kmp_step(text: str, state: int, c: str) -> int:
    """How much of `text` the characters read spell after reading `c` (state: before)."""
    while True:
        if state < len(text) and text[state] == c:
            return state + 1
        if state == 0:
            return 0
        # longest proper border of text[:state] (texts are short: computed, not tabled)
        state = max((k for k in range(state) if text[:k] == text[state - k : state]), default=0)


class _Automaton:
    """One pattern as an NFA over states (token index, detail): detail is the offset into a
    literal, or for a variable (count, contains states, not_contains states)."""

    def __init__(self, pattern: KvPattern):
        self.tokens = pattern.tokens

    def start(self) -> set:
        return self._enter(0)

    def _enter(self, i: int) -> set:
        if i == len(self.tokens):
            return {(i, None)}
        token = self.tokens[i]
        if isinstance(token, str):
            return {(i, 0)}
        var: Var = token[1]
        return {(i, (0, (0,) * len(var.contains), (0,) * len(var.not_contains)))}

    def accepting(self, state) -> bool:
        return state[0] == len(self.tokens)

    def step(self, state, c: str) -> set:
        i, detail = state
        if i == len(self.tokens):
            return set()
        token = self.tokens[i]
        if isinstance(token, str):
            if token[detail] != c:
                return set()
            return self._enter(i + 1) if detail + 1 == len(token) else {(i, detail + 1)}
        var: Var = token[1]
        count, has, lacks = detail
        if var.digits and not ("0" <= c <= "9"):
            return set()
        count += 1
        if var.length is not None and count > var.length:
            return set()
        has = tuple(h if h == len(s) else _kmp_step(s, h, c) for s, h in zip(var.contains, has, strict=True))
        lacks = tuple(_kmp_step(s, h, c) for s, h in zip(var.not_contains, lacks, strict=True))
        if any(h == len(s) for s, h in zip(var.not_contains, lacks, strict=True)):
            return set()
        capped = count if var.length is not None else min(count, 1)
        out = {(i, (capped, has, lacks))}
        done = (var.length is None or count == var.length) and all(
            h == len(s) for s, h in zip(var.contains, has, strict=True)
        )
        if done:
            out |= self._enter(i + 1)
        return out


def _alphabet(*patterns: KvPattern) -> list[str]:
    seen: set[str] = set()
    for p in patterns:
        for t in p.tokens:
            if isinstance(t, str):
                seen |= set(t)
            else:
                for s in (*t[1].contains, *t[1].not_contains):
                    seen |= set(s)
    extra = [next((d for d in "0123456789" if d not in seen), None), next(c for c in _OTHERS if c not in seen)]
    # a plain letter first, so the witness reads like a key ('x_x_x', not '_____')
    return [c for c in reversed(extra) if c is not None] + sorted(seen)


def common_key(a: KvPattern, b: KvPattern, limit: int = 200_000) -> str | None:
    """The shortest key both `a` and `b` match, or None when no key can (the search stops
    at `limit` state pairs and then answers as if they overlap: '' means "cannot tell")."""
    ma, mb = _Automaton(a), _Automaton(b)
    chars = _alphabet(a, b)
    starts = [(sa, sb) for sa in ma.start() for sb in mb.start()]
    parent: dict = {s: None for s in starts}
    queue = deque(starts)
    while queue:
        pair = queue.popleft()
        sa, sb = pair
        if ma.accepting(sa) and mb.accepting(sb):
            key = []
            while parent[pair] is not None:
                pair, c = parent[pair]
                key.append(c)
            return "".join(reversed(key))
        for c in chars:
            for na in ma.step(sa, c):
                for nb in mb.step(sb, c):
                    nxt = (na, nb)
                    if nxt not in parent:
                        parent[nxt] = (pair, c)
                        if len(parent) > limit:
                            return ""
                        queue.append(nxt)
    return None


class OverlapIndex:
    """A repo's registered patterns, for checking a new one against only those it could
    overlap: two keys that match begin with both patterns' leading text, so one leading
    text must be a prefix of the other (a pattern that begins with a variable, leading
    text '', is compared with every pattern). 10k patterns of distinct prefixes register
    in well under a second instead of 50M pairwise searches."""

    def __init__(self):
        self._by_lead: dict[str, list[KvPattern]] = {}
        self._leads: list[str] = []  # sorted

    @staticmethod
    def lead(p: KvPattern) -> str:
        return p.tokens[0] if isinstance(p.tokens[0], str) else ""

    def conflicts(self, p: KvPattern) -> list[tuple[KvPattern, str]]:
        """(registered pattern, a key both match, '' when too complex to tell) for each clash."""
        lead = self.lead(p)
        leads = {lead[:n] for n in range(len(lead) + 1)} & self._by_lead.keys()
        i = bisect.bisect_left(self._leads, lead)
        while i < len(self._leads) and self._leads[i].startswith(lead):
            leads.add(self._leads[i])
            i += 1
        out = []
        for other in (o for lead_ in sorted(leads) for o in self._by_lead[lead_]):
            key = common_key(other, p)
            if key is not None:
                out.append((other, key))
        return out

    def add(self, p: KvPattern) -> None:
        lead = self.lead(p)
        if lead not in self._by_lead:
            self._by_lead[lead] = []
            bisect.insort(self._leads, lead)
        self._by_lead[lead].append(p)
