"""Shell word semantics the parser leaves to us: escapes, ``${...}`` parameter and brace expansion.

Only what the shell would compute from text already in the command: ``cu\\rl`` is ``curl``,
``$'\\x63url'`` is ``curl``, ``${C,,}`` lowercases, ``${a:-x}`` defaults, ``${a/x/y}`` replaces,
``file{,.bak}`` is two words. Unknown variables stay unresolved (the caller marks the word
dynamic). Every step charges the call's budget (``guard.normalize.budget``) for the text it
builds, before it builds it; brace expansion is capped at ``MAX_BRACE_WORDS`` words instead.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from guard.normalize import budget

_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b"}
_C_ESCAPES.update({"E": "\x1b", "\\": "\\", "'": "'", '"': '"', "?": "?"})
_ESCAPE_RE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.S)


def unescape_word(text: str) -> str:
    """Unquoted word: a backslash keeps the next character literally; backslash-newline joins."""
    if "\\" not in text:
        return text
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text, flags=re.S)


def unescape_double_quoted(text: str) -> str:
    """Inside double quotes a backslash only escapes ``$ ` " \\`` and newline."""
    if "\\" not in text:
        return text
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def c_unescape(text: str, octal_needs_zero: bool = False) -> str:
    """ANSI-C escapes as in ``$'...'``, ``echo -e`` and ``printf`` (``\\x63``, ``\\143``, ``\\u0063``)."""
    if "\\" not in text:
        return text

    def sub(m: re.Match[str]) -> str:
        body = m.group(1)
        head = body[0]
        try:
            if head == "x":
                return chr(int(body[1:], 16))
            if head in "uU":
                return chr(int(body[1:], 16))
            if head.isdigit():
                digits = body
                if octal_needs_zero and head != "0":
                    return "\\" + body
                return chr(int(digits, 8) & 0xFF)
        except ValueError:
            return m.group(0)
        if head == "c" and len(body) == 2:
            return chr(ord(body[1].upper()) ^ 0x40)
        return _C_ESCAPES.get(body, m.group(0))

    return _ESCAPE_RE.sub(sub, text)


_EXPANSION_RE = re.compile(r"^\$\{([#!]?)([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])(.*)\}$", re.S)


def _remove(value: str, pattern: str, op: str) -> str:
    """``#``/``##`` strip the shortest/longest matching prefix, ``%``/``%%`` the suffix."""
    n = len(value)
    if op in ("#", "##"):
        cuts = range(n + 1) if op == "#" else range(n, -1, -1)
        for k in cuts:
            budget.charge(k + len(pattern), "pattern removal")  # quadratic in the value: bounded
            if fnmatchcase(value[:k], pattern):
                return value[k:]
    else:
        cuts = range(n, -1, -1) if op == "%" else range(n + 1)
        for k in cuts:
            budget.charge(n - k + len(pattern), "pattern removal")
            if fnmatchcase(value[k:], pattern):
                return value[:k]
    return value


def expand_parameter(text: str, lookup: dict[str, str]) -> str | None:
    """Evaluate one ``${...}`` expansion against known variables; None when it depends on unknowns."""
    m = _EXPANSION_RE.match(text)
    if not m:
        return None
    prefix, name, rest = m.groups()
    value = lookup.get(name)
    if prefix == "#":
        return str(len(value)) if value is not None else None
    if prefix == "!":
        return lookup.get(value) if value is not None else None
    if not rest:
        return value
    index = re.match(r"^\[([@*]|\d+)\]$", rest)
    if index:  # arrays are kept as their words joined by spaces
        if value is None:
            return None
        if index.group(1) in "@*":
            return value
        words = value.split()
        position = int(index.group(1))
        return words[position] if position < len(words) else ""
    for op in (":-", ":=", "-", "="):
        if rest.startswith(op):
            word = rest[len(op) :]
            if op.startswith(":"):
                return value if value else word
            return value if value is not None else word
    if rest.startswith(":+") or rest.startswith("+"):
        return rest.split("+", 1)[1] if value else ""
    if value is None:
        return None
    budget.charge(len(value), "parameter expansion")
    if rest in (",,", "^^", ",", "^", "~~", "~"):
        if rest == ",,":
            return value.lower()
        if rest == "^^":
            return value.upper()
        if rest == ",":
            return value[:1].lower() + value[1:]
        if rest == "^":
            return value[:1].upper() + value[1:]
        return value.swapcase()
    if rest[:2] in ("##", "%%") or rest[:1] in ("#", "%"):
        op = rest[:2] if rest[:2] in ("##", "%%") else rest[:1]
        return _remove(value, rest[len(op) :], op)
    if rest.startswith("/"):
        body = rest[1:]
        every = body.startswith("/")
        body = body[1:] if every or body[:1] in "#%" else body
        pattern, _, replacement = body.partition("/")
        if not pattern:
            return value
        hits = value.count(pattern) if every else min(1, value.count(pattern))
        budget.value(len(value) + hits * max(0, len(replacement) - len(pattern)), "replacement")
        return value.replace(pattern, replacement) if every else value.replace(pattern, replacement, 1)
    sub = re.match(r"^:\s*(-?\d+)(?::\s*(-?\d+))?$", rest)
    if sub:
        offset = int(sub.group(1))
        start = offset if offset >= 0 else max(0, len(value) + offset)
        if sub.group(2) is None:
            return value[start:]
        length = int(sub.group(2))
        end = start + length if length >= 0 else len(value) + length
        return value[start:end]
    return None


MAX_BRACE_WORDS = 16


def expand_braces(text: str) -> list[str]:
    """Bash brace alternatives, left to right (``a{b,c}d`` -> ``abd acd``; nested lists too);
    at most ``MAX_BRACE_WORDS`` words."""
    depth = 0
    start = -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = text[start + 1 : i]
                options = _split_top(inner)
                if len(options) > 1:
                    out: list[str] = []
                    for option in options:
                        out.extend(expand_braces(text[:start] + option + text[i + 1 :]))
                        if len(out) >= MAX_BRACE_WORDS:
                            return out[:MAX_BRACE_WORDS]
                    return out
    return [text]


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += ch == "{"
        depth -= ch == "}" and depth > 0
        current.append(ch)
    parts.append("".join(current))
    return parts
