"""Literal pre-filters for rule regexes: a regex search that cannot succeed is skipped for a ``in``.

Most rule regexes can only match a text that contains one of a few literal strings
(``(docker|containerd|podman|crio)\\.sock`` needs ``.sock``; ``^env:HUSKY=0`` needs
``env:HUSKY=0``). Checking ``literal in text`` is a memchr-speed scan in C; a regex search over
a 1 KB code block through a long alternation is not. ``required_literals`` reads the regex's own
parse tree (``re._parser``) and returns a set of strings at least one of which occurs in every text
the regex matches, or None when it cannot tell (then the regex is always run). It is sound by
construction (only literals every match must contain are kept) and checked against the regex on
every corpus text and on generated strings (``tests/guard/test_prefilter.py``).
"""

from __future__ import annotations

import functools
import re
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

MIN_LITERAL = 2  # shorter literals are in nearly every text: no gain
MAX_LITERALS = 24  # more alternatives than this and the scans cost what the regex costs

Requirement = frozenset[str] | None


@functools.lru_cache(maxsize=1024)
def required_literals(pattern: str, flags: int = 0) -> tuple[frozenset[str], bool] | None:
    """``(literals, folded)``: every match of ``pattern`` contains one of ``literals`` (compared
    with the text lower-cased when ``folded``); None when no such set is known."""
    try:
        parsed = sre_parse.parse(pattern, flags)
    except (re.error, RecursionError):
        return None
    folded = bool((parsed.state.flags | flags) & re.IGNORECASE) or "(?i" in pattern or "(?-i" in pattern
    found = _sequence(list(parsed), folded)
    if not found or len(found) > MAX_LITERALS or min(map(len, found)) < MIN_LITERAL:
        return None
    if folded and not all(literal.isascii() for literal in found):
        return None
    return frozenset(found), folded


def _better(a: Requirement, b: Requirement) -> Requirement:
    """The more selective of two requirements (longer shortest literal, then fewer literals)."""
    if a is None:
        return b
    if b is None:
        return a
    key_a, key_b = (min(map(len, a)), -len(a)), (min(map(len, b)), -len(b))
    return a if key_a >= key_b else b


def _sequence(items: list[tuple[object, object]], folded: bool) -> Requirement:
    """A sequence must contain each of its parts: the best requirement among its literal runs
    and its sub-patterns."""
    best: Requirement = None
    run: list[str] = []

    def close() -> None:
        nonlocal best, run
        if run:
            text = "".join(run)
            best = _better(best, frozenset({text.lower() if folded else text}))
        run = []

    for op, av in items:
        if op is sre.LITERAL:
            run.append(chr(av))  # type: ignore[arg-type]
            continue
        close()
        best = _better(best, _item(op, av, folded))
    close()
    return best


def _item(op: object, av: object, folded: bool) -> Requirement:
    if op is sre.SUBPATTERN:
        return _sequence(list(av[-1]), folded)  # type: ignore[index]
    if op is sre.BRANCH:
        union: set[str] = set()
        for branch in av[1]:  # type: ignore[index]
            need = _sequence(list(branch), folded)
            if need is None:
                return None
            union.update(need)
        return frozenset(union)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)):
        low, _high, sub = av  # type: ignore[misc]
        return _sequence(list(sub), folded) if low >= 1 else None
    if op is getattr(sre, "ATOMIC_GROUP", None):
        return _sequence(list(av), folded)  # type: ignore[arg-type]
    return None  # classes, anchors, lookarounds, back references: nothing required here


@functools.lru_cache(maxsize=512)
def lowered(text: str) -> str:
    """``text.lower()``, once per distinct text (a code block is checked by many rules)."""
    return text.lower()


def may_match(requirement: tuple[frozenset[str], bool] | None, text: str) -> bool:
    """False only when the regex behind ``requirement`` cannot match ``text``. A case-insensitive
    regex is only pre-filtered over ASCII text: Unicode case folding (``ſ`` matches ``s``) is the
    regex engine's to decide."""
    if requirement is None:
        return True
    literals, folded = requirement
    if folded:
        if not text.isascii():
            return True
        text = lowered(text)
    return any(literal in text for literal in literals)
