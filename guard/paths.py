"""Protected-path matching: does a path (or a glob the shell would expand) reach a protected tree?

Patterns come from settings plus per-task extras. Three forms, all matched on whole path components:

- an absolute prefix with optional globs (``/grader``, ``/proc/*/root``): the path or anything below;
- ``**/NAME/**``: any path with a component matching NAME (``hidden_tests``, ``.hidden``);
- a relative pattern: anchored at the workspace (``tests/private`` means ``/workspace/tests/private``).

Paths are made absolute against the caller's working directory and ``..`` is folded first, so
``../../hidden/x`` from ``/workspace`` is ``/hidden/x``. An argument that still holds glob characters
(``cat /hid*/*``) matches when it could expand into a protected tree: component by component, each
protected component must be matched by the argument's glob.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

WORKSPACE = "/workspace"
_GLOB_CHARS = re.compile(r"[*?\[]")
_NEEDS_FOLDING = re.compile(r"//|/\.{1,2}(/|$)|/$")


def absolute(path: str, cwd: str = WORKSPACE) -> str:
    """The absolute, ``..``-folded form of ``path`` as seen from ``cwd`` (``~`` is root's home)."""
    if path.startswith("~"):
        path = "/root" + path[1:]
    if not path.startswith("/"):
        path = f"{cwd or WORKSPACE}/{path}"
    if not _NEEDS_FOLDING.search(path):
        return path  # already canonical: the common case, without normpath's cost
    folded = posixpath.normpath(path)
    return "/" + folded.lstrip("/") if folded.startswith("//") else folded


def _component_regex(component: str) -> str:
    """Translate one glob component (``*``, ``?``, ``[...]``) to a regex that stays inside it."""
    out: list[str] = []
    i = 0
    while i < len(component):
        ch = component[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = component.find("]", i + 2)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = component[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class _Pattern:
    source: str
    regex: re.Pattern[str]  # matches a literal absolute path
    components: tuple[str, ...]  # glob components, for glob-vs-glob overlap
    anywhere: bool  # a ``**/NAME/**`` pattern: components may sit at any depth


def _compile(pattern: str) -> _Pattern:
    anywhere = pattern.startswith("**/")
    core = pattern.removeprefix("**/")
    while core.endswith(("/**", "/")):
        core = core.removesuffix("/**").removesuffix("/")
    core = core.strip("/") if anywhere else core
    if not anywhere and not pattern.startswith("/"):
        core = absolute(core)
    components = tuple(c for c in core.split("/") if c)
    regex = re.compile(("(?:^|/)" if anywhere else "^/") + _body_regex(components))
    return _Pattern(pattern, regex, components, anywhere)


def _body_regex(components: tuple[str, ...]) -> str:
    """Components as a regex over a path: ``**`` spans any number of directories, and the match
    ends at a component boundary (a pattern covers the path it names and everything below)."""
    pieces: list[str] = []
    for component in components:
        pieces.append("(?:[^/]+/)*" if component == "**" else _component_regex(component) + "/")
    body = "".join(pieces)
    return body[:-1] + "(?:/|$)" if body.endswith("/") else body


def _overlaps(arg_component: str, protected_component: str) -> bool:
    """Could the shell glob ``arg_component`` expand to a name the protected glob matches?"""
    if fnmatchcase(protected_component, arg_component) or fnmatchcase(arg_component, protected_component):
        return True
    return bool(_GLOB_CHARS.search(protected_component) and _GLOB_CHARS.search(arg_component))


class ProtectedPaths:
    """Matches paths against protected patterns; ``match`` returns the pattern hit, or None."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(dict.fromkeys(p for p in patterns if p and p.strip()))
        self._compiled = tuple(_compile(p) for p in self.patterns)
        # one search for all patterns; the named group that took part says which one matched
        alternatives = "|".join(f"(?P<p{i}>{c.regex.pattern})" for i, c in enumerate(self._compiled))
        self._any = re.compile(alternatives) if alternatives else None

    def match(self, path: str, cwd: str = WORKSPACE, narrow: bool = False) -> str | None:
        """The protected pattern ``path`` falls under (itself or any descendant), or None. A glob
        ``path`` matches when it could expand into a protected tree; with ``narrow`` a ``**`` that
        spans a whole pattern must leave a name, not a wildcard (deleting ``**/*.pyc`` is not
        aimed at a protected directory; searching ``/**/test_*.py`` does reach hidden tests)."""
        if not path or "\n" in path:
            return None
        full = absolute(path, cwd)
        if _GLOB_CHARS.search(full):
            return self._match_glob(full, narrow)
        hit = self._any.search(full) if self._any is not None else None
        if hit is None or hit.lastgroup is None:
            return None
        return self._compiled[int(hit.lastgroup[1:])].source

    def contains(self, directory: str, cwd: str = WORKSPACE) -> str | None:
        """The anchored pattern that names something strictly below ``directory`` (a directory
        operation there, ``rm -r``/``grep -r``/``mv``, reaches it), or None. Patterns that may
        match at any depth (``**/NAME``) say nothing about a given directory and never count."""
        if not directory or "\n" in directory:
            return None
        parts = tuple(c for c in absolute(directory, cwd).split("/") if c)
        for pattern in self._compiled:
            if not pattern.anywhere and _ancestor(parts, pattern.components):
                return pattern.source
        return None

    def _match_glob(self, full: str, narrow: bool = False) -> str | None:
        arg = tuple(c for c in full.split("/") if c)
        for pattern in self._compiled:
            if pattern.anywhere:
                # a literal-bearing argument component must meet the protected name at some depth
                if any(a.strip("*?") and any(_overlaps(a, p) for p in pattern.components) for a in arg):
                    return pattern.source
                continue
            if _intersect(arg, pattern.components, narrow=narrow):
                return pattern.source
        return None


def _ancestor(parts: tuple[str, ...], components: tuple[str, ...]) -> bool:
    """Whether the directory ``parts`` is a proper ancestor of something ``components`` match."""
    if not components:
        return False
    if not parts:
        return True
    head = components[0]
    if head == "**":
        return True  # below this point anything can lie
    return fnmatchcase(parts[0], head) and _ancestor(parts[1:], components[1:])


def _intersect(
    arg: tuple[str, ...], pattern: tuple[str, ...], spanned: bool = False, narrow: bool = False
) -> bool:
    """Could a path matched by the glob ``arg`` lie at or below a path ``pattern`` matches?
    (``**`` in either spans any number of components; a pattern covers its subtree.) With
    ``narrow``, where the argument's ``**`` had to span the whole pattern, what it leaves must
    name something (``find . -name pre-commit``), not anything (``find . -name '*.pyc'`` says
    nothing about what a protected directory holds)."""
    if not pattern:
        return not (narrow and spanned) or not any(_GLOB_CHARS.search(a) for a in arg)
    if not arg:
        return all(p == "**" for p in pattern)
    if pattern[0] == "**":
        return _intersect(arg, pattern[1:], spanned, narrow) or _intersect(arg[1:], pattern, spanned, narrow)
    if arg[0] == "**":
        return _intersect(arg[1:], pattern, spanned, narrow) or _intersect(arg, pattern[1:], True, narrow)
    return _overlaps(arg[0], pattern[0]) and _intersect(arg[1:], pattern[1:], spanned, narrow)
