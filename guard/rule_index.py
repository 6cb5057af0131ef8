"""Indexes over a rule set's fact regexes, so most rules are never evaluated on a call: the fact
kinds a regex can match (``^write:``, ``^(edit|append):``) and one combined regex per group of
rules (a gate: when it finds nothing, none of the group can match). ``guard.rules`` builds them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from guard.rule_match import Rule

_PREFIX_ALT = re.compile(r"\^(?:([\w-]+)|\(((?:[\w-]+\|)*[\w-]+)\))(?::|\$|$)")


def _top_level_alternatives(pattern: str) -> list[str] | None:
    """``pattern`` split at its top-level ``|`` (None when its brackets cannot be followed)."""
    parts: list[str] = []
    depth = 0
    in_class = False
    start = 0
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    if depth != 0 or in_class:
        return None
    parts.append(pattern[start:])
    return parts


def fact_prefixes(pattern: str | None) -> frozenset[str] | None:
    """The fact kinds (the part before ``:``) a fact regex can match, when every top-level
    alternative starts with ``^kind:`` or ``^(kind1|kind2):``; None when it cannot be told (then
    the rule is always checked)."""
    if pattern is None:
        return None
    alternatives = _top_level_alternatives(pattern)
    if not alternatives:
        return None
    kinds: set[str] = set()
    for alt in alternatives:
        m = _PREFIX_ALT.match(alt)
        if m is None:
            return None
        kinds.update((m.group(1) or m.group(2)).split("|"))
    return frozenset(kinds)


def kind_index(kinds_of: dict[int, frozenset[str]]) -> tuple[frozenset[int], dict[str, frozenset[int]]]:
    """The rules that need some fact kind, and for each kind the rules it satisfies."""
    index: dict[str, set[int]] = {}
    for rule, kinds in kinds_of.items():
        for kind in kinds:
            index.setdefault(kind, set()).add(rule)
    return frozenset(kinds_of), {kind: frozenset(rules) for kind, rules in index.items()}


def fact_kinds(facts: Iterable[str]) -> set[str]:
    """The kinds (the part before ``:``) of ``facts``."""
    return {f.partition(":")[0] for f in facts}


def fact_gate(
    rules: Sequence[Rule], indices: Iterable[int], code: bool
) -> tuple[re.Pattern[str], frozenset[int]] | None:
    """One regex that matches wherever any of these rules' fact regexes matches (None: cannot
    combine, e.g. a user regex with global inline flags; then no gate, every rule is checked)."""
    chosen = list(indices)
    if not chosen:
        return None
    patterns = [(rules[i].code.fact if code else rules[i].fact) for i in chosen]  # type: ignore[union-attr]
    try:
        combined = re.compile("|".join(f"(?:{p.pattern})" for p in patterns if p is not None), re.MULTILINE)
    except re.error:
        return None
    return combined, frozenset(chosen)
