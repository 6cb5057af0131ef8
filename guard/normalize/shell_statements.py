"""The walk over a bash syntax tree: statements, redirections and words, as the shell runs them.

The walk keeps the little state a static reading can trust: variables assigned in the command,
the working directory (``cd``), files written by earlier parts of the same command (so ``cat > x.py
<<EOF ... EOF; python x.py`` scans what runs) and the static output of pure text stages (so
``echo ... | base64 -d | sh`` is read as the command it decodes to). Each simple command, its
words expanded, goes to ``dispatch``: what a command does is ``guard.normalize.shell``, a
subclass, so this module stays below it. A node budget bounds the total work.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

from tree_sitter import Node

from guard.normalize import budget
from guard.normalize.budget import Unparseable
from guard.normalize.findings import MAX_NESTING, Findings
from guard.normalize.shell_syntax import has_brace_list, node_text
from guard.normalize.words import (
    c_unescape,
    expand_braces,
    expand_parameter,
    unescape_double_quoted,
    unescape_word,
)
from guard.paths import WORKSPACE, absolute
from guard.types import Effect

MAX_NODE_DEPTH = 120  # syntax-tree depth walked recursively
MAX_NODES = 40_000  # syntax nodes visited per call, all nesting levels together
MAX_LOOP_VALUES = 4
MAX_ENV_FACT = 200  # characters of an environment value kept in its ``env:`` fact
NULL_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})

_DEFAULT_VARS = {"HOME": "/root", "USER": "root", "SHELL": "/bin/bash", "PWD": WORKSPACE, "IFS": " "}
_SPLIT_KINDS = frozenset({"simple_expansion", "expansion", "command_substitution"})
_QUOTED_KINDS = frozenset({"string", "raw_string", "ansi_c_string"})
_WHITESPACE = re.compile(r"\s")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ARRAY_ALL = re.compile(r'^"?\$\{\w+\[@\]\}"?$')
_STATIC_BASENAME = re.compile(r"/[A-Za-z0-9_.+-]+$")
_WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>"})


class StatementWalker(ABC):
    """Walks one shell script's statements; ``dispatch`` says what each simple command does."""

    def __init__(self, findings: Findings, depth: int, source: str, cwd: str = WORKSPACE) -> None:
        if depth > MAX_NESTING:
            raise Unparseable("shell nested too deeply")
        self.f = findings
        self.depth = depth
        self.source = source
        self.cwd = cwd
        self.vars: dict[str, str] = dict(_DEFAULT_VARS)
        self.fd = 63
        self.found: list[str] | None = None  # the selection of the last find run (find_selection)
        self.piped_find: list[str] | None = None  # that of a find piped into the current stage

    def _tick(self, level: int) -> None:
        self.f.nodes += 1
        if self.f.nodes > MAX_NODES:
            raise Unparseable("command too large to analyse")
        if level > MAX_NODE_DEPTH:
            raise Unparseable("command nested too deeply")

    # ---- statements --------------------------------------------------------------------------
    def stmt(self, node: Node, stdin: str | None, level: int) -> str | None:
        """Walk a statement; return what it prints when that is statically known."""
        self._tick(level)
        kind = node.type
        if kind == "command":
            return self.command(node, [], stdin, level)
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            redirects = [c for c in node.children if c.type.endswith("redirect")]
            if body is not None and body.type == "command":
                return self.command(body, redirects, stdin, level)
            in_text, writes, after = self.redirects(redirects, level)
            # a bare ``> file`` truncates it: no command, empty output
            out = self.stmt(body, in_text if in_text is not None else stdin, level + 1) if body else ""
            self.finish_writes(writes, out)
            return self.after_heredoc(after, out, level) if after else (None if writes else out)
        if kind == "pipeline":
            out = stdin
            for child in node.named_children:
                # what a ``find`` before this stage selects (its printed paths), for ``| xargs CMD``
                self.piped_find, self.found = self.found, None
                out = self.stmt(child, out, level + 1)
            self.piped_find = self.found = None
            return out
        if kind == "variable_assignment":
            self.assign(node, level)
            return None
        if kind in ("declaration_command", "unset_command"):
            for child in node.named_children:
                if child.type == "variable_assignment":
                    self.assign(child, level)
                    name = child.child_by_field_name("name")
                    if name is not None:
                        self.f.facts.append(f"export:{node_text(name)}")
            return None
        if kind == "for_statement":
            return self.for_loop(node, level)
        if kind in ("comment", "heredoc_body", "heredoc_start", "heredoc_end"):
            return None
        if kind in ("command_substitution", "process_substitution"):
            return self.substitution(node, level)
        if kind == "file_redirect":  # ``$(< file)``: bash reads the file, no command runs
            in_text, writes, _ = self.redirects([node], level)
            self.finish_writes(writes, "")
            return in_text
        if kind in ("program", "list", "subshell", "compound_statement"):
            outs = [
                self.stmt(c, stdin if i == 0 else None, level + 1) for i, c in enumerate(node.named_children)
            ]
            return _joined(outs)
        for child in node.named_children:
            self.stmt(child, None, level + 1)
        return None

    def for_loop(self, node: Node, level: int) -> None:
        var = node.child_by_field_name("variable")
        values = [self.words(v, level)[0] for v in node.children_by_field_name("value")]
        flat = [w for ws in values for w in ws][:MAX_LOOP_VALUES]
        body = node.child_by_field_name("body")
        for value in flat or [""]:
            if var is not None:
                self.vars[node_text(var)] = value
            if body is not None:
                self.stmt(body, None, level + 1)
        return None

    def assign(self, node: Node, level: int) -> None:
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name is None:
            return
        if value is None:
            self.vars[node_text(name)] = ""
            return
        if value.type == "array":
            parts = [self.word(c, level)[0] for c in value.named_children]
            self.vars[node_text(name)] = " ".join(parts)
            return
        text, dynamic = self.word(value, level)
        if dynamic:
            self.vars.pop(node_text(name), None)
        else:
            self.vars[node_text(name)] = text
            self.note_env(node_text(name), text)

    def note_env(self, name: str, value: str) -> None:
        """``env:NAME=VALUE`` for environment-style (upper-case) names, so rules can read what
        ``PYTEST_ADDOPTS=... pytest`` or ``export PYTEST_ADDOPTS=...`` sets, not only that it is set."""
        if _ENV_NAME.match(name):
            self.f.facts.append(f"env:{name}={value[:MAX_ENV_FACT]}")

    def substitution(self, node: Node, level: int) -> str | None:
        return _joined([self.stmt(c, None, level + 1) for c in node.named_children])

    # ---- simple commands ---------------------------------------------------------------------
    def command(self, node: Node, redirects: list[Node], stdin: str | None, level: int) -> str | None:
        words: list[Node] = []
        redirects = list(redirects)
        assigns: list[Node] = []
        for child in node.named_children:
            kind = child.type
            if kind == "variable_assignment":
                assigns.append(child)
            elif kind.endswith("redirect"):
                redirects.append(child)
            elif kind != "comment":
                words.append(child)
        for r in redirects:  # ``cat a 2>/dev/null b``: tree-sitter hangs ``b`` on the redirect
            if r.type == "file_redirect":
                words.extend(r.children_by_field_name("destination")[1:])
        outer_span = self.f.span
        if self.depth == 0:
            self.f.span = (node.start_byte, node.end_byte)
        try:
            return self._command(node, words, assigns, redirects, stdin, level)
        finally:
            self.f.span = outer_span

    def _command(
        self,
        node: Node,
        words: list[Node],
        assigns: list[Node],
        redirects: list[Node],
        stdin: str | None,
        level: int,
    ) -> str | None:
        for a in assigns:
            self.assign(a, level)
        in_text, writes, after = self.redirects(redirects, level)
        if in_text is not None:
            stdin = in_text
        out: str | None = None
        if words:
            argv: list[str] = []
            dynamic_program = False
            previous_end = -1
            for i, w in enumerate(words):
                if w.type == "command_name" and w.named_child_count == 1:
                    w = w.named_children[0]
                parts, dynamic = self.words(w, level)
                if w.start_byte == previous_end and argv and parts:
                    # the grammar splits ``''\curl`` into two nodes; the shell reads one word
                    argv[-1] += parts[0]
                    parts = parts[1:]
                    dynamic_program = dynamic_program or (len(argv) == 1 and dynamic)
                elif i == 0 and (dynamic or not parts):
                    dynamic_program = True
                argv.extend(parts)
                previous_end = w.end_byte
            if dynamic_program and argv and _STATIC_BASENAME.search(argv[0]):
                # ``$VIRTUAL_ENV/bin/python``: the directory is unknown, the program is not
                argv[0] = argv[0].rsplit("/", 1)[1]
                dynamic_program = False
            if dynamic_program:
                self.f.facts.append(f"dynamic_program:{node_text(words[0])[:80]}")
            if argv:
                out = self.dispatch(argv, stdin, level)
        self.finish_writes(writes, out)
        if after:
            return self.after_heredoc(after, out, level)
        return None if writes else out

    def after_heredoc(self, after: list[Node], out: str | None, level: int) -> str | None:
        """tree-sitter hangs the rest of a heredoc's first line (``| cmd``, ``&& cmd``) on the
        heredoc node; run it here with the right input."""
        result = out
        for node in after:
            if node.type == "pipeline":
                for child in node.named_children:
                    result = self.stmt(child, result, level + 1)
            else:
                result = self.stmt(node, None, level + 1)
        return result

    def redirects(
        self, redirects: list[Node], level: int
    ) -> tuple[str | None, list[tuple[str, str]], list[Node]]:
        """Input text, files written (path, operator) and statements trailing a heredoc line."""
        stdin: str | None = None
        writes: list[tuple[str, str]] = []
        after: list[Node] = []
        for r in redirects:
            if r.type == "heredoc_redirect":
                strip_tabs = any(c.type == "<<-" for c in r.children)
                for child in r.children:
                    if child.type == "heredoc_body":
                        body = node_text(child)
                        stdin = re.sub(r"(?m)^\t+", "", body) if strip_tabs else body
                    elif child.type == "file_redirect":
                        _, more, _ = self.redirects([child], level)
                        writes.extend(more)
                    elif (
                        child.type in ("pipeline", "command", "list", "redirected_statement")
                        or r.field_name_for_child(r.children.index(child)) == "right"
                    ):
                        after.append(child)
            elif r.type == "herestring_redirect":
                for child in r.named_children:
                    stdin = self.word(child, level)[0] + "\n"
            elif r.type == "file_redirect":
                dest = r.child_by_field_name("destination")
                ops = [c.type for c in r.children if not c.is_named]
                op = ops[0] if ops else ">"
                descriptor = r.child_by_field_name("descriptor")
                if dest is None or dest.type == "number" or node_text(dest) == "-":
                    continue
                target = self.word(dest, level)[0]
                if op in ("<", "<>"):
                    full = self.f.add_path(target, self.cwd)
                    stdin = self.f.files.get(full)
                    self.f.effects.append(Effect("read", full))
                elif op in _WRITE_OPS or op == ">&":
                    if target in NULL_SINKS:
                        continue
                    if descriptor is not None and node_text(descriptor) == "2":
                        self.f.effects.append(Effect("write", self.f.add_path(target, self.cwd)))
                        continue
                    writes.append((target, op))
        return stdin, writes, after

    def finish_writes(self, writes: list[tuple[str, str]], out: str | None) -> None:
        for target, op in writes:
            full = absolute(target, self.cwd)
            content = out
            if op in (">>", "&>>") and out is not None:
                budget.value(len(self.f.files.get(full, "")) + len(out), "appended file")
                content = self.f.files.get(full, "") + out
                if full not in self.f.files:
                    self.f.facts.append(f"append:{full}")
            self.f.note_write(target, content, self.cwd, self.depth)

    # ---- words -------------------------------------------------------------------------------
    def words(self, node: Node, level: int) -> tuple[list[str], bool]:
        """A word node as argv entries: unquoted expansions split on whitespace like the shell,
        brace alternatives (``file{,.bak}``, ``{a,b}.sh``) expanded into one word each."""
        text, dynamic = self.word(node, level)
        if not dynamic and node.type == "concatenation" and has_brace_list(node):
            return expand_braces(text), dynamic
        if dynamic or not _WHITESPACE.search(text):
            return [text], dynamic
        kinds = {c.type for c in node.children} if node.type == "concatenation" else {node.type}
        if kinds & _SPLIT_KINDS and not kinds & _QUOTED_KINDS:
            return text.split(), dynamic
        if _ARRAY_ALL.match(node_text(node)):  # "${cmd[@]}": one word per element even when quoted
            return text.split(), dynamic
        return [text], dynamic

    def word(self, node: Node, level: int) -> tuple[str, bool]:
        """The value of one word node and whether it depends on something unknown."""
        self._tick(level)
        kind = node.type
        if kind == "word":
            return unescape_word(node_text(node)), False
        if kind == "raw_string":
            return node_text(node)[1:-1], False
        if kind == "ansi_c_string":
            return c_unescape(node_text(node)[2:-1]), False
        if kind in ("string", "translated_string", "concatenation", "command_name"):
            parts: list[str] = []
            dynamic = False
            for child in node.children:
                if child.type == "string_content":
                    parts.append(unescape_double_quoted(node_text(child)))
                elif child.type in ('"', "$"):
                    continue
                elif child.is_named:
                    value, dyn = self.word(child, level + 1)
                    parts.append(value)
                    dynamic = dynamic or dyn
            budget.value(sum(map(len, parts)), "shell word")  # a=$a$a doubles: bounded here
            return "".join(parts), dynamic
        if kind == "simple_expansion":
            name = node_text(node)[1:]
            if name in self.vars:
                return self.vars[name], False
            return node_text(node), True
        if kind == "expansion":
            for child in node.named_children:
                if child.type in ("command_substitution", "process_substitution"):
                    self.substitution(child, level + 1)
            value = expand_parameter(node_text(node), self.vars)
            return (value, False) if value is not None else (node_text(node), True)
        if kind == "command_substitution":
            out = self.substitution(node, level + 1)
            return (out.rstrip("\n"), False) if out is not None else (node_text(node), True)
        if kind == "process_substitution":
            out = self.substitution(node, level + 1)
            self.fd -= 1
            name = f"/dev/fd/{self.fd}"
            if out is not None:
                self.f.files[name] = out
            return name, False
        if kind in ("number", "arithmetic_expansion", "brace_expression", "special_variable_name"):
            return node_text(node), False
        for child in node.named_children:
            if child.type in ("command_substitution", "process_substitution"):
                self.substitution(child, level + 1)
        return node_text(node), True

    @abstractmethod
    def dispatch(
        self, argv: list[str], stdin: str | None, level: int, source: str | None = None
    ) -> str | None:
        """Record the simple command ``argv``; return its output when statically known."""


def _joined(outs: list[str | None]) -> str | None:
    """The output of statements run in sequence, when all are known (bounded like any value)."""
    known = [o for o in outs if o is not None]
    if not outs or len(known) != len(outs):
        return None
    budget.value(sum(map(len, known)), "command output")
    return "".join(known)
