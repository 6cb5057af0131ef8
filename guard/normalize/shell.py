"""Bash, as the shell would run it: tree-sitter-bash parses, this module walks the tree.

Why tree-sitter: it is a C parser (a typical agent command parses in a few microseconds; bashlex,
pure Python, takes 150-500 µs before any rule runs) and it covers the whole grammar (heredocs,
process substitution, ``${x,,}``, arrays). Its error recovery marks what it cannot parse with
ERROR/MISSING nodes; such a call is reported as unparseable, never guessed at.

The walk keeps the little state a static reading can trust: variables assigned in the command,
the working directory (``cd``), files written by earlier parts of the same command (so ``cat > x.py
<<EOF ... EOF; python x.py`` scans what runs) and the static output of pure text stages (so
``echo ... | base64 -d | sh`` is read as the command it decodes to). Everything found is recorded
in a ``Findings`` collector; nesting (``bash -c``, ``eval``, decoded payloads, code handed to
``os.system``) recurses with a depth bound, and a node budget bounds the total work.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from guard.normalize import budget, programs
from guard.normalize.budget import Unparseable
from guard.normalize.decode import static_output
from guard.normalize.foreign import foreign_facts
from guard.normalize.pycode import python_facts
from guard.normalize.words import c_unescape, expand_parameter, unescape_double_quoted, unescape_word
from guard.paths import WORKSPACE, absolute
from guard.types import CodeBlock, Command

MAX_NESTING = 6  # bash -c inside eval inside base64 inside ...
MAX_NODE_DEPTH = 120  # syntax-tree depth walked recursively
MAX_NODES = 40_000  # syntax nodes visited per call, all nesting levels together
MAX_COMMANDS = 1_000
MAX_CODE_CHARS = 128 * 1024
MAX_LOOP_VALUES = 4
PARSE_BUDGET_S = 0.1  # per parse; typical agent commands parse in a few microseconds

_LANGUAGE = Language(tree_sitter_bash.language())
_LOCAL = threading.local()  # a tree-sitter Parser must not be shared between threads
_DEFAULT_VARS = {"HOME": "/root", "USER": "root", "SHELL": "/bin/bash", "PWD": WORKSPACE, "IFS": " "}
_SPLIT_KINDS = frozenset({"simple_expansion", "expansion", "command_substitution"})
_QUOTED_KINDS = frozenset({"string", "raw_string", "ansi_c_string"})
_PATTERN_FIRST = frozenset({"sed", "grep", "egrep", "fgrep", "rg", "ag", "ack", "awk", "gawk", "jq"})
_WHITESPACE = re.compile(r"\s")
_CHECK = re.compile(r"\bassert\w*\b|pytest\.raises|\.fail\(")
_COMMENTED_CHECK = re.compile(r"#\s*(assert\w*\b|self\.assert|with pytest\.raises)")
_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+test\w*\s*\(", re.M)
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
MAX_ENV_FACT = 200  # characters of an environment value kept in its ``env:`` fact
_HEREDOC_THEN_REDIRECT = re.compile(
    r"""(?P<heredoc><<-?\s*(?P<q>['"]?)\w+(?P=q))"""
    r"""(?P<redirects>(?:[ \t]+\d*(?:>>?|<|&>>?|>&|<&)[ \t]*[^\s|;&<>]+)+)"""
)
_GLOB = re.compile(r"[*?\[]")
# programs whose glob-looking arguments are patterns (find -path, tar --exclude), not shell globs
_PATTERN_PROGRAMS = frozenset(
    {"find", "grep", "egrep", "fgrep", "rg", "ag", "fd", "tar", "rsync", "zip", "git"}
)
_GIT_INTERNALS = (
    "packed-refs",
    "FETCH_HEAD",
    "ORIG_HEAD",
    "HEAD",
    "config",
    "refs",
    "objects",
    "logs",
    "index",
)
_ARRAY_ALL = re.compile(r'^"?\$\{\w+\[@\]\}"?$')
_STATIC_BASENAME = re.compile(r"/[A-Za-z0-9_.+-]+$")
_WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>"})
_NULL_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
_EXT_LANG = {
    ".py": "python",
    ".pyw": "python",
    ".pth": "pth",
    ".sh": "shell",
    ".bash": "shell",
    ".js": "node",
    ".mjs": "node",
    ".cjs": "node",
    ".ts": "node",
    ".pl": "perl",
    ".rb": "ruby",
    ".php": "php",
    ".awk": "awk",
    ".cfg": "config",
    ".ini": "config",
    ".toml": "config",
}
_SHELL_NAMES = frozenset({".bashrc", ".bash_profile", ".profile", ".zshrc", ".bash_login", ".envrc"})
_CONFIG_NAMES = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "conftest.py"})


def lang_for_path(path: str) -> str | None:
    name = posixpath.basename(path)
    if name in _CONFIG_NAMES and not name.endswith(".py"):
        return "config"
    if name in _SHELL_NAMES or "/.git/hooks/" in path:
        return "shell"
    if name in ("Makefile", "makefile", "GNUmakefile") or name.endswith(".mk"):
        return "make"
    return _EXT_LANG.get(posixpath.splitext(name)[1].lower())


@dataclass
class Findings:
    """Everything one call does, gathered across all nesting levels."""

    commands: list[Command] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    blocks: list[CodeBlock] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # absolute path -> content written here
    nodes: int = 0
    # byte range of the top-level simple command being read: commands found inside it (nested
    # shells, decoded payloads, code it runs) carry it, so a decoy can stand in for that command
    span: tuple[int, int] | None = None
    scanned: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    def add_path(self, path: str, cwd: str = WORKSPACE) -> str:
        full = absolute(path, cwd)
        self.paths.append(full)
        return full

    def add_code(self, lang: str, text: str, origin: str, path: str | None, depth: int, cwd: str) -> None:
        """Record a code block and scan it: facts, and nested shell or code it hands on."""
        if depth > MAX_NESTING:
            raise Unparseable("code nested too deeply")
        if len(text) > MAX_CODE_CHARS:
            raise Unparseable(f"code block over {MAX_CODE_CHARS} characters")
        budget.charge(len(text), "code")
        seen = self.scanned.get((lang, text))
        if seen is not None:  # written and then run in the same call: scanned once, recorded twice
            self.blocks.append(CodeBlock(lang, text, origin, path, seen))
            return
        facts: list[str] = []
        if lang in ("python", "pth"):
            source = (
                text
                if lang == "python"
                else "\n".join(line for line in text.splitlines() if line.startswith(("import ", "import\t")))
            )
            pf = python_facts(source)
            facts = pf.facts
            for p in pf.paths:
                self.add_path(p, cwd)
            for item in pf.shell:
                sub = ShellWalker(self, depth + 1, "python subprocess", cwd)
                if isinstance(item, list):
                    sub.dispatch(item, None, depth + 1)
                else:
                    sub.run(item)
            for inner in pf.python:
                self.add_code("python", inner, origin, None, depth + 1, cwd)
            if origin == "run":  # files code run by the call writes are the call's writes
                for written, content in pf.written:
                    self.note_write(written, content, cwd, depth + 1)
        elif lang == "shell":
            ShellWalker(self, depth + 1, f"{origin}:{path}" if origin == "write" else "script", cwd).run(text)
        elif lang == "make":
            # recipe lines are shell commands; ``@``/``-`` prefixes only change echo and errors
            recipes = [line.lstrip("\t").lstrip("@-+") for line in text.splitlines() if line.startswith("\t")]
            ShellWalker(self, depth + 1, f"{origin}:{path}", cwd).run("\n".join(recipes))
        elif lang not in ("config", "text"):
            ff = foreign_facts(lang, text)
            facts = ff.facts
            for p in ff.paths:
                self.add_path(p, cwd)
            for cmd in ff.shell:
                ShellWalker(self, depth + 1, f"{lang} system", cwd).run(c_unescape(cmd))
        unique = tuple(dict.fromkeys(facts))
        self.scanned[(lang, text)] = unique
        self.blocks.append(CodeBlock(lang, text, origin, path, unique))

    def note_edit(self, full: str, old: str, new: str, depth: int) -> None:
        """An in-place change of ``full`` from ``old`` to ``new`` (edit_file, a patch hunk): the
        write, what it removes (all asserts, ``def test_*``), and ``new`` scanned as code."""
        self.add_path(full)
        self.facts.append(f"write:{full}")
        self.facts.append(f"edit:{full}")  # changes a file that exists: the project's own code
        if old.strip() and not new.strip():
            self.facts.append(f"edit_removes:{full}")
        before, after = _assert_count(old), _assert_count(new)
        if after < before:
            # all checks gone, or one commented out: removed; fewer but some left may be a merge
            # of asserts (``assert (x, y) == (1, 2)``) and is only escalated
            gone = after == 0 or _COMMENTED_CHECK.search(new) is not None
            self.facts.append(f"edit_{'removes' if gone else 'reduces'}_assert:{full}")
        if len(_TEST_DEF.findall(new)) < len(_TEST_DEF.findall(old)):
            self.facts.append(f"edit_removes_test:{full}")  # def test_x -> def _test_x: not collected
        lang = lang_for_path(full)
        if lang and new.strip():
            self.add_code(lang, textwrap.dedent(new), "write", full, depth, WORKSPACE)

    def note_write(self, path: str, content: str | None, cwd: str, depth: int) -> None:
        """A file written (or truncated) by the call; its content is scanned as code when known."""
        full = self.add_path(path, cwd)
        self.facts.append(f"write:{full}")
        if content is None:
            return
        if not content.strip():
            self.facts.append(f"write_empty:{full}")
        self.files[full] = content
        lang = lang_for_path(full)
        if lang:
            self.add_code(lang, content, "write", full, depth, cwd)


def _joined(outs: list[str | None]) -> str | None:
    """The output of statements run in sequence, when all are known (bounded like any value)."""
    known = [o for o in outs if o is not None]
    if not outs or len(known) != len(outs):
        return None
    budget.value(sum(map(len, known)), "command output")
    return "".join(known)


def _assert_count(text: str) -> int:
    """Checks in live code: a commented-out assert no longer counts."""
    return sum(len(_CHECK.findall(line.split("#", 1)[0])) for line in text.splitlines())


def patch_hunks(diff: str, cwd: str) -> list[tuple[str, str, str, bool]]:
    """(absolute target, removed text, added text, created) per file of a unified diff; a file
    whose old side is /dev/null is created, not edited."""
    out: list[tuple[str, str, str, bool]] = []
    target: str | None = None
    created = False
    old: list[str] = []
    new: list[str] = []
    for line in diff.splitlines():
        if line.startswith("--- "):
            if target is not None:
                out.append((target, "\n".join(old), "\n".join(new), created))
            target, old, new = None, [], []
            created = line[4:].split("\t", 1)[0].strip() == "/dev/null"
        elif line.startswith("+++ "):
            name = line[4:].split("\t", 1)[0].strip()
            name = name[2:] if name.startswith(("a/", "b/")) else name
            target = absolute(name, cwd) if name != "/dev/null" else None
        elif line.startswith("@@"):
            continue
        elif target is not None and line.startswith("-"):
            old.append(line[1:])
        elif target is not None and line.startswith("+"):
            new.append(line[1:])
    if target is not None:
        out.append((target, "\n".join(old), "\n".join(new), created))
    return out


_SED_TEXT = re.compile(r"^\s*(?:\d+|\$|/[^/]*/)?\s*([iac])\\?\s?(.*)$", re.S)


def _sed_inserted_text(argv: list[str]) -> str | None:
    """The text a ``sed`` script inserts, appends or substitutes a line with (``1i import os``)."""
    scripts = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-e", "--expression")]
    if not scripts:
        operands = [a for a in argv[1:] if not a.startswith("-")]
        scripts = operands[:1]
    texts = []
    for script in scripts:
        m = _SED_TEXT.match(script)
        if m:
            texts.append(m.group(2).replace("\\n", "\n").replace("\\t", "\t"))
    return "\n".join(texts) if texts else None


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


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


class ShellWalker:
    """Walks one shell script; nested scripts get their own walker over the same ``Findings``."""

    def __init__(self, findings: Findings, depth: int, source: str, cwd: str = WORKSPACE) -> None:
        if depth > MAX_NESTING:
            raise Unparseable("shell nested too deeply")
        self.f = findings
        self.depth = depth
        self.source = source
        self.cwd = cwd
        self.vars: dict[str, str] = dict(_DEFAULT_VARS)
        self.aliases: dict[str, str] = {}
        self.git_aliases: dict[str, str] = {}
        self.fd = 63

    # ---- entry -------------------------------------------------------------------------------
    def run(self, script: str, stdin: str | None = None) -> str | None:
        budget.charge(len(script), "nested shell")  # each nested eval/bash -c is parsed anew
        return self.stmt(parse_tree(script), stdin, 0)

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
                out = self.stmt(child, out, level + 1)
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
                        self.f.facts.append(f"export:{_text(name)}")
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
                self.vars[_text(var)] = value
            if body is not None:
                self.stmt(body, None, level + 1)
        return None

    def assign(self, node: Node, level: int) -> None:
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name is None:
            return
        if value is None:
            self.vars[_text(name)] = ""
            return
        if value.type == "array":
            parts = [self.word(c, level)[0] for c in value.named_children]
            self.vars[_text(name)] = " ".join(parts)
            return
        text, dynamic = self.word(value, level)
        if dynamic:
            self.vars.pop(_text(name), None)
        else:
            self.vars[_text(name)] = text
            self.note_env(_text(name), text)

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
                self.f.facts.append(f"dynamic_program:{_text(words[0])[:80]}")
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
                        body = _text(child)
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
                if dest is None or dest.type == "number" or _text(dest) == "-":
                    continue
                target = self.word(dest, level)[0]
                if op in ("<", "<>"):
                    full = self.f.add_path(target, self.cwd)
                    stdin = self.f.files.get(full)
                elif op in _WRITE_OPS or op == ">&":
                    if target in _NULL_SINKS:
                        continue
                    if descriptor is not None and _text(descriptor) == "2":
                        self.f.add_path(target, self.cwd)
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
        """A word node as argv entries: unquoted expansions split on whitespace like the shell."""
        text, dynamic = self.word(node, level)
        if dynamic or not _WHITESPACE.search(text):
            return [text], dynamic
        kinds = {c.type for c in node.children} if node.type == "concatenation" else {node.type}
        if kinds & _SPLIT_KINDS and not kinds & _QUOTED_KINDS:
            return text.split(), dynamic
        if _ARRAY_ALL.match(_text(node)):  # "${cmd[@]}": one word per element even when quoted
            return text.split(), dynamic
        return [text], dynamic

    def word(self, node: Node, level: int) -> tuple[str, bool]:
        """The value of one word node and whether it depends on something unknown."""
        self._tick(level)
        kind = node.type
        if kind == "word":
            return unescape_word(_text(node)), False
        if kind == "raw_string":
            return _text(node)[1:-1], False
        if kind == "ansi_c_string":
            return c_unescape(_text(node)[2:-1]), False
        if kind in ("string", "translated_string", "concatenation", "command_name"):
            parts: list[str] = []
            dynamic = False
            for child in node.children:
                if child.type == "string_content":
                    parts.append(unescape_double_quoted(_text(child)))
                elif child.type in ('"', "$"):
                    continue
                elif child.is_named:
                    value, dyn = self.word(child, level + 1)
                    parts.append(value)
                    dynamic = dynamic or dyn
            budget.value(sum(map(len, parts)), "shell word")  # a=$a$a doubles: bounded here
            return "".join(parts), dynamic
        if kind == "simple_expansion":
            name = _text(node)[1:]
            if name in self.vars:
                return self.vars[name], False
            return _text(node), True
        if kind == "expansion":
            for child in node.named_children:
                if child.type in ("command_substitution", "process_substitution"):
                    self.substitution(child, level + 1)
            value = expand_parameter(_text(node), self.vars)
            return (value, False) if value is not None else (_text(node), True)
        if kind == "command_substitution":
            out = self.substitution(node, level + 1)
            return (out.rstrip("\n"), False) if out is not None else (_text(node), True)
        if kind == "process_substitution":
            out = self.substitution(node, level + 1)
            self.fd -= 1
            name = f"/dev/fd/{self.fd}"
            if out is not None:
                self.f.files[name] = out
            return name, False
        if kind in ("number", "arithmetic_expansion", "brace_expression", "special_variable_name"):
            return _text(node), False
        for child in node.named_children:
            if child.type in ("command_substitution", "process_substitution"):
                self.substitution(child, level + 1)
        return _text(node), True

    # ---- what a command does -----------------------------------------------------------------
    def dispatch(
        self, argv: list[str], stdin: str | None, level: int, source: str | None = None
    ) -> str | None:
        """Record ``argv`` as a command, look through wrappers and nested shells, run static
        text transforms; return the command's output when known."""
        if len(self.f.commands) >= MAX_COMMANDS:
            raise Unparseable("too many commands")
        if argv[0] in self.aliases and source != "alias":
            return self.dispatch([*self.aliases[argv[0]].split(), *argv[1:]], stdin, level, "alias")
        word = argv[0]
        name = programs.program_name(word)
        if _GLOB.search(name) and (matches := programs.expand_program_glob(name)):
            out = None
            for candidate in matches:
                out = self.dispatch([candidate, *argv[1:]], stdin, level, source)
            return out if len(matches) == 1 else None
        argv = [name, *argv[1:]]
        source = source or self.source
        if name == "git":
            for key, value in _git_config_pairs(argv):
                if key.lower() in _GIT_EXEC_KEYS or (key.startswith("alias.") and value.startswith("!")):
                    self.nested(value.lstrip("!"), None, f"git -c {key}")
            argv = _canonical_git(argv, self.git_aliases)
            if argv[1:3] == ["config"] or (len(argv) > 2 and argv[1] == "config"):
                rest = [a for a in argv[2:] if not a.startswith("-")]
                if len(rest) >= 2 and rest[0].startswith("alias."):
                    self.git_aliases[rest[0][6:]] = " ".join(rest[1:])
                elif len(rest) >= 2 and rest[0].lower() in _GIT_EXEC_KEYS:
                    self.nested(" ".join(rest[1:]), None, f"git config {rest[0]}")
        self.f.commands.append(Command(name, tuple(argv), source, self.f.span))
        self.collect_paths(name, argv)

        builtin = _BUILTINS.get(name)
        if builtin is not None:
            return builtin(self, argv, stdin, level)
        if name in ("env", "sudo"):  # env NAME=VALUE cmd: the assignments are environment too
            self.note_wrapper_env(name, argv)
        unwrapped = programs.unwrap(name, argv)
        if unwrapped is not None:
            inner, shell_string = unwrapped
            if shell_string:
                return self.nested(" ".join(inner), stdin, name)
            if name == "xargs" and stdin is not None:
                inner = _xargs_inner(argv, inner, stdin)
            return self.dispatch(inner, stdin, level, name)
        if name in programs.SHELLS:
            return self.shell(argv, stdin, name)
        if programs.is_python(name):
            return self.python(argv, stdin)
        self.note_file_effects(name, argv)
        if stdin is not None and (name == "patch" or (name == "git" and argv[1:2] == ["apply"])):
            for target, removed, added, created in patch_hunks(stdin, self.cwd):
                if created:
                    self.f.note_write(target, added, self.cwd, self.depth + 1)
                else:
                    self.f.note_edit(target, removed, added, self.depth + 1)
        lang = programs.INTERPRETERS.get(name)
        if lang is not None:
            return self.interpreter(lang, argv, stdin)
        return static_output(name, argv, stdin, self.f.files, lambda p: absolute(p, self.cwd))

    # -- shell builtins and programs that change what later commands mean (``_BUILTINS``) ----------

    def builtin_cd(self, argv: list[str], stdin: str | None, level: int) -> str | None:
        target = next((a for a in argv[1:] if not a.startswith("-")), "/root")
        self.cwd = absolute(target, self.cwd)
        self.vars["PWD"] = self.cwd
        return None

    def builtin_alias(self, argv: list[str], stdin: str | None, level: int) -> str | None:
        for arg in argv[1:]:
            key, eq, value = arg.partition("=")
            if eq:
                self.aliases[key] = value
        return None

    def builtin_export(self, argv: list[str], stdin: str | None, level: int) -> str | None:
        """``export``/``declare``/``typeset``/``local``/``readonly NAME=VALUE``: variables and environment."""
        for arg in argv[1:]:
            if "=" in arg and re.match(r"^[A-Za-z_]\w*=", arg):
                key, _, value = arg.partition("=")
                self.vars[key] = value
                self.f.facts.append(f"export:{key}")
                self.note_env(key, value)
        return None

    def builtin_find(self, argv: list[str], stdin: str | None, level: int) -> str | None:
        for inner in programs.find_exec(argv):
            self.dispatch(inner, None, level, "find -exec")
        return None

    def builtin_eval(self, argv: list[str], stdin: str | None, level: int) -> str | None:
        return self.nested(" ".join(argv[1:]), stdin, "eval")

    def builtin_source(self, argv: list[str], stdin: str | None, level: int) -> str | None:
        """``source FILE`` / ``. FILE``: a script this call wrote (or stdin) runs here, so read it."""
        if len(argv) > 1:
            content = self.f.files.get(absolute(argv[1], self.cwd)) or self.f.files.get(argv[1])
            if content is None and argv[1] in ("/dev/stdin", "-"):
                content = stdin
            if content is not None:
                return self.nested(content, None, "source")
        return None

    def builtin_tee(self, argv: list[str], stdin: str | None, level: int) -> str | None:
        for target in (a for a in argv[1:] if not a.startswith("-")):
            if target not in _NULL_SINKS:
                self.f.note_write(target, stdin, self.cwd, self.depth)
        return stdin

    def note_wrapper_env(self, name: str, argv: list[str]) -> None:
        """``env``/``sudo NAME=VALUE cmd``: the leading assignments are the command's environment."""
        value_opts = programs.WRAPPERS[name].value_opts
        skip = False
        for arg in argv[1:]:
            if skip:
                skip = False
            elif _ASSIGNMENT.match(arg):
                key, _, value = arg.partition("=")
                self.note_env(key, value)
            elif arg.startswith("-"):
                skip = arg in value_opts
            else:
                break

    def collect_paths(self, name: str, argv: list[str]) -> None:
        args = argv[1:]
        if name in _PATTERN_FIRST and not any(a in ("-e", "-f", "--regexp", "--file") for a in args):
            first = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
            if first is not None:
                args = args[:first] + args[first + 1 :]
        base = _directory_option(name, args, self.cwd)  # tar -C / reference: names under /
        for arg in args:
            value = arg
            if arg.startswith("-"):
                if "=" not in arg:
                    continue
                value = arg.split("=", 1)[1]
            elif "=" in arg and name in ("dd",):
                value = arg.split("=", 1)[1]
            if not value or "://" in value or len(value) > 4096 or _WHITESPACE.search(value):
                continue
            if "/" in value or value.startswith((".", "~")) or base != WORKSPACE:
                self.f.add_path(value, base)
                if "/.." in value and value.startswith("/"):
                    self.f.paths.append(value)  # /proc/self/root/../.. : the unfolded spelling matters too
                full = absolute(value, base)
                if (
                    "/.git/" in full
                    and name not in _PATTERN_PROGRAMS
                    and _GLOB.search(full.rsplit("/", 1)[-1])
                ):
                    base, pattern = full.rsplit("/", 1)  # cat .git/packed-ref? reads packed-refs
                    for known in fnmatch.filter(_GIT_INTERNALS, pattern):
                        self.f.add_path(f"{base}/{known}", self.cwd)

    def note_file_effects(self, name: str, argv: list[str]) -> None:
        """Deletions, moves, truncations and in-place edits, as ``delete:``/``write:`` facts."""
        if name == "git" and len(argv) > 2 and argv[1] == "mv":  # git mv moves like mv
            name, argv = "mv", argv[1:]
        operands = [a for a in argv[1:] if not a.startswith("-")]
        if name in ("rm", "unlink", "shred", "rmdir"):
            self.f.facts.extend(f"delete:{absolute(p, self.cwd)}" for p in operands)
        elif name == "mv" and len(operands) >= 2:
            target = absolute(operands[-1], self.cwd)
            moved = [absolute(p, self.cwd) for p in operands[:-1]]
            into_dir = operands[-1].endswith("/") or len(moved) > 1
            if not all(_still_collected(m, target, into_dir) for m in moved):
                self.f.facts.extend(f"delete:{m}" for m in moved)
            self.f.facts.append(f"write:{target}")
        elif name in ("cp", "install", "ln") and len(operands) >= 2:
            self.f.facts.append(f"write:{absolute(operands[-1], self.cwd)}")
            if operands[0] == "/dev/null":
                self.f.facts.append(f"write_empty:{absolute(operands[-1], self.cwd)}")
        elif name == "rsync" and len(operands) >= 2:
            # --delete* empties the destination of what the source lacks; --remove-source-files
            # deletes the sources: an empty source synced with --delete wipes a tree
            if any(a.startswith("--delete") or a == "--del" for a in argv):
                self.f.facts.append(f"delete:{absolute(operands[-1], self.cwd)}")
            if "--remove-source-files" in argv:
                self.f.facts.extend(f"delete:{absolute(p, self.cwd)}" for p in operands[:-1])
            self.f.facts.append(f"write:{absolute(operands[-1], self.cwd)}")
        elif name == "truncate":
            size = next((a for a in argv if a.startswith(("-s", "--size"))), "")
            sized = size in ("-s", "--size") and "-s0" not in argv
            values = operands[1:] if sized else operands
            for p in values:
                self.f.facts.append(f"write_empty:{absolute(p, self.cwd)}")
        elif _edits_in_place(name, argv):
            inserted = _sed_inserted_text(argv) if name == "sed" else None
            for p in operands[1:]:
                full = absolute(p, self.cwd)
                self.f.facts.append(f"write:{full}")
                lang = lang_for_path(full)
                if inserted and lang:  # sed -i '1i import os; os._exit(0)' pkg/__init__.py
                    self.f.add_code(lang, inserted, "write", full, self.depth + 1, self.cwd)
        elif name == "sponge" and operands:
            self.f.facts.append(f"write:{absolute(operands[-1], self.cwd)}")
        elif name in ("ex", "vi", "vim", "nvim", "ed", "red"):
            takes_value = ("-c", "-S", "--cmd")
            files = [
                a
                for i, a in enumerate(argv[1:], 1)
                if not a.startswith(("-", "+")) and argv[i - 1] not in takes_value
            ]
            self.f.facts.extend(f"write:{absolute(p, self.cwd)}" for p in files)
        elif name == "dd":
            for arg in argv[1:]:
                if arg.startswith("of="):
                    self.f.facts.append(f"write:{absolute(arg[3:], self.cwd)}")
        elif name in ("chmod", "chattr") and operands[:1] in (["000"], ["0"], ["a-r"], ["-r"]):
            self.f.facts.extend(f"write_empty:{absolute(p, self.cwd)}" for p in operands[1:])

    def nested(self, script: str, stdin: str | None, source: str) -> str | None:
        return ShellWalker(self.f, self.depth + 1, source, self.cwd).run(script, stdin)

    def shell(self, argv: list[str], stdin: str | None, name: str) -> str | None:
        i = 1
        while i < len(argv):
            arg = argv[i]
            if arg in programs.SHELL_VALUE_OPTS:
                i += 2
                continue
            if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
                if i + 1 < len(argv):
                    return self.nested(argv[i + 1], stdin, f"{name} -c")
                return None
            if arg.startswith(("-", "+")) and len(arg) > 1:
                i += 1
                continue
            content = self.f.files.get(absolute(arg, self.cwd)) or self.f.files.get(arg)
            if content is not None:
                return self.nested(content, stdin, f"{name} {arg}")
            return None
        if stdin is not None:
            return self.nested(stdin, None, f"{name} stdin")
        self.f.facts.append(f"shell_reads_unknown_input:{name}")
        return None

    def python(self, argv: list[str], stdin: str | None) -> str | None:
        i = 1
        while i < len(argv):
            arg = argv[i]
            if arg == "-c" and i + 1 < len(argv):
                self.f.add_code("python", argv[i + 1], "run", None, self.depth, self.cwd)
                return None
            if arg.startswith("-c") and len(arg) > 2:
                self.f.add_code("python", arg[2:], "run", None, self.depth, self.cwd)
                return None
            if arg == "-m" and i + 1 < len(argv):
                module = argv[i + 1]
                self.dispatch([module, *argv[i + 2 :]], stdin, 0, f"{argv[0]} -m")
                return None
            if arg in ("-W", "-X", "--check-hash-based-pycs"):
                i += 2
                continue
            if arg.startswith("-") and arg != "-":
                i += 1
                continue
            if arg == "-":
                break
            content = self.f.files.get(absolute(arg, self.cwd))
            if content is not None:
                self.f.add_code("python", content, "run", absolute(arg, self.cwd), self.depth, self.cwd)
            return None
        if stdin is not None:
            self.f.add_code("python", stdin, "run", None, self.depth, self.cwd)
        else:
            self.f.facts.append(f"interpreter_reads_unknown_input:{argv[0]}")
        return None

    def interpreter(self, lang: str, argv: list[str], stdin: str | None) -> str | None:
        flags = programs.INLINE_CODE_FLAGS.get(lang, frozenset())
        operands: list[str] = []
        i = 1
        while i < len(argv):
            arg = argv[i]
            inline = arg in flags or (lang in ("perl", "ruby") and re.fullmatch(r"-[a-zA-Z]*[eE]", arg))
            if inline and i + 1 < len(argv):
                self.f.add_code(lang, argv[i + 1], "run", None, self.depth, self.cwd)
                return None
            if lang == "awk" and arg in ("-F", "-v", "-f"):
                if arg == "-f" and i + 1 < len(argv):
                    content = self.f.files.get(absolute(argv[i + 1], self.cwd))
                    if content is not None:
                        self.f.add_code(lang, content, "run", None, self.depth, self.cwd)
                        return None
                i += 2
                continue
            if not arg.startswith("-") or arg == "-":
                operands.append(arg)
            i += 1
        if lang == "awk" and operands:
            self.f.add_code(lang, operands[0], "run", None, self.depth, self.cwd)
            return None
        if operands and operands[0] != "-":
            content = self.f.files.get(absolute(operands[0], self.cwd))
            if content is not None:
                self.f.add_code(lang, content, "run", absolute(operands[0], self.cwd), self.depth, self.cwd)
            return None
        if stdin is not None:
            self.f.add_code(lang, stdin, "run", None, self.depth, self.cwd)
        return None


_DIRECTORY_OPTS = {"tar": ("-C", "--directory"), "bsdtar": ("-C", "--directory"), "zip": ("-b",)}


def _directory_option(name: str, args: list[str], cwd: str) -> str:
    """The directory a program resolves its file operands in: ``tar -C DIR`` / ``--directory=DIR``."""
    opts = _DIRECTORY_OPTS.get(name)
    if not opts:
        return cwd
    for i, arg in enumerate(args):
        if arg in opts and i + 1 < len(args):
            return absolute(args[i + 1], cwd)
        if arg.startswith("--directory="):
            return absolute(arg.split("=", 1)[1], cwd)
    return cwd


_TEST_MODULE = re.compile(r"^(test_[^/]*|[^/]*_test)\.py$")
_TEST_DIR = re.compile(r"/tests?(/|$)")
_TEST_DIR_NAME = re.compile(r"^(tests?|unit|integration|functional|regression|e2e)$")


def _still_collected(source: str, target: str, into_dir: bool) -> bool:
    """A move that keeps a test module where pytest still collects it (``mv tests/test_a.py
    tests/unit/`` or a rename to another ``test_*.py``) reorganises tests; it deletes none. A
    target without a trailing slash counts as a directory only when named like a test directory
    (``mv tests/test_a.py tests/disabled`` renames the module to a file pytest skips)."""
    if not _TEST_MODULE.match(posixpath.basename(source)):
        return False
    last = posixpath.basename(target)
    if last.endswith(".py"):
        return bool(_TEST_MODULE.match(last))
    if not (into_dir or _TEST_DIR_NAME.match(last)):
        return False
    return "." not in last and bool(_TEST_DIR.search(target))


def _edits_in_place(name: str, argv: list[str]) -> bool:
    """sed/awk -i / --in-place, perl/ruby -i (also bundled: ``perl -pi -e``)."""
    if name == "sed":  # bundled short options too: sed -Ei, sed -ni
        return any(a.startswith("--in-place") or re.match(r"^-[a-zA-Z]*i", a) for a in argv)
    if name in ("awk", "gawk"):
        return any(a.startswith(("-i", "--in-place")) for a in argv)
    # perl bundles may carry -0 / -l digits before the i: perl -0pi, perl -l0pi.bak
    return name in ("perl", "ruby") and any(re.match(r"^-[a-zA-Z0-9]*i", a) for a in argv)


def _xargs_inner(argv: list[str], inner: list[str], stdin: str) -> list[str]:
    """What xargs runs when its input is known: ``-I R`` substitutes R, otherwise input words
    are appended."""
    replace = None
    for i, arg in enumerate(argv):
        if arg in ("-I", "--replace") and i + 1 < len(argv):
            replace = argv[i + 1]
        elif arg.startswith("-I") and len(arg) > 2:
            replace = arg[2:]
        elif arg in ("-i",) or arg.startswith("--replace="):
            replace = arg.partition("=")[2] or "{}"
    words = stdin.split()[:64]
    if replace is None:
        return inner + words
    first = stdin.strip().split("\n")[0] if stdin.strip() else ""
    return [a.replace(replace, first) for a in inner]


_GIT_VALUE_OPTS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"}
)


_GIT_EXEC_KEYS = frozenset(
    {
        "core.pager",
        "core.sshcommand",
        "core.editor",
        "core.fsmonitor",
        "diff.external",
        "credential.helper",
        "sequence.editor",
        "gpg.program",
        "core.hookspath",
        "pager.log",
        "pager.diff",
        "pager.show",
    }
)


def _git_config_pairs(argv: list[str]) -> list[tuple[str, str]]:
    """``git -c key=value`` pairs given before the sub-command."""
    pairs: list[tuple[str, str]] = []
    for i, arg in enumerate(argv[:-1]):
        if arg == "-c" and "=" in argv[i + 1]:
            key, _, value = argv[i + 1].partition("=")
            pairs.append((key, value))
    return pairs


def _canonical_git(argv: list[str], known_aliases: dict[str, str] | None = None) -> list[str]:
    """``git -C . --no-pager -c alias.l='log --all' l`` → ``git log --all``: global options
    dropped, a command-line alias expanded."""
    aliases: dict[str, str] = dict(known_aliases or {})
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in _GIT_VALUE_OPTS and i + 1 < len(argv):
            if arg == "-c" and argv[i + 1].startswith("alias."):
                key, _, value = argv[i + 1][6:].partition("=")
                aliases[key] = value
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        break
    rest = argv[i:]
    if rest and rest[0] in aliases:
        expansion = aliases[rest[0]].lstrip("!").split()
        rest = expansion + rest[1:]
    return ["git", *rest]


# Commands the walker handles itself, by program name: each changes what later commands mean (cd,
# alias, export) or holds commands of its own (find -exec, eval, source); tee writes its stdin.
_BUILTINS: dict[str, Callable[[ShellWalker, list[str], str | None, int], str | None]] = {
    "cd": ShellWalker.builtin_cd,
    "alias": ShellWalker.builtin_alias,
    **dict.fromkeys(("export", "declare", "typeset", "local", "readonly"), ShellWalker.builtin_export),
    "find": ShellWalker.builtin_find,
    "eval": ShellWalker.builtin_eval,
    "source": ShellWalker.builtin_source,
    ".": ShellWalker.builtin_source,
    "tee": ShellWalker.builtin_tee,
}
