"""Bash text into a syntax tree: tree-sitter-bash, within a time budget, errors refused.

Why tree-sitter: it is a C parser (a typical agent command parses in a few microseconds; bashlex,
pure Python, takes 150-500 µs before any rule runs) and it covers the whole grammar (heredocs,
process substitution, ``${x,,}``, arrays). Its error recovery marks what it cannot parse with
ERROR/MISSING nodes; such a text is reported as unparseable (``Unparseable``), never guessed at.
The walk over the tree is ``guard.normalize.shell_statements``.
"""

from __future__ import annotations

import re
import threading
import time

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from guard.normalize.budget import Unparseable

PARSE_BUDGET_S = 0.1  # per parse; typical agent commands parse in a few microseconds

_LANGUAGE = Language(tree_sitter_bash.language())
_LOCAL = threading.local()  # a tree-sitter Parser must not be shared between threads
_HEREDOC_THEN_REDIRECT = re.compile(
    r"""(?P<heredoc><<-?\s*(?P<q>['"]?)\w+(?P=q))"""
    r"""(?P<redirects>(?:[ \t]+\d*(?:>>?|<|&>>?|>&|<&)[ \t]*[^\s|;&<>]+)+)"""
)


def _parse(script: str) -> Node:
    """Parse with a time budget: tree-sitter's error recovery is quadratic on some inputs (``x|``
    or ``a)`` repeated thousands of times takes seconds), so a parse that overruns is cancelled
    and the call escalated. NUL bytes are refused before parsing (bash cannot run them, and
    tree-sitter stalls on them where the budget is not checked)."""
    if "\x00" in script:
        raise Unparseable("NUL byte in shell text")
    data = script.encode("utf-8", "surrogatepass")
    parser = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = Parser(_LANGUAGE)
    deadline = time.perf_counter() + PARSE_BUDGET_S
    try:
        tree = parser.parse(
            lambda offset, _point: data[offset : offset + 65536],
            progress_callback=lambda *_state: time.perf_counter() > deadline,
        )
    except ValueError as exc:  # cancelled by the budget
        parser.reset()  # a cancelled parse would otherwise resume on the next call
        raise Unparseable(f"shell text too costly to parse (over {PARSE_BUDGET_S * 1000:.0f} ms)") from exc
    return tree.root_node


def parse_tree(script: str) -> Node:
    """The syntax tree of ``script`` (``Unparseable`` on a syntax error)."""
    return parse_source(script)[0]


def parse_source(script: str) -> tuple[Node, str]:
    """The syntax tree and the text it was parsed from (byte offsets of nodes refer to it)."""
    root = _parse(script)
    if root.has_error:
        # tree-sitter-bash rejects ``cmd <<EOF 2>&1 | tail``; bash does not. Moving the redirects
        # before the heredoc operator means the same to bash and parses.
        swapped = _HEREDOC_THEN_REDIRECT.sub(r"\g<redirects> \g<heredoc>", script)
        if swapped != script:
            retry = _parse(swapped)
            if not retry.has_error:
                return retry, swapped
        raise Unparseable(f"shell syntax error near: {_first_error(root)!r}")
    return root, script


def _first_error(node: Node) -> str:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            return (n.text or b"").decode("utf-8", "replace")[:60]
        stack.extend(reversed(n.children))
    return ""


def node_text(node: Node) -> str:
    """The source text of ``node``."""
    return (node.text or b"").decode("utf-8", "replace")


def has_brace_list(node: Node) -> bool:
    """An unquoted ``{`` word, then a word with a comma, then ``}``: bash's brace alternatives."""
    texts = [node_text(c) if c.type == "word" else "" for c in node.children]
    return any(
        texts[i] == "{" and "," in texts[i + 1] and "}" in texts[i + 2 :] for i in range(len(texts) - 2)
    )
