"""``Findings``: everything one call does, collected across all nesting levels, and the reading of
code blocks the call writes or runs.

The shell walker (``guard.normalize.shell``) records into a ``Findings``; code found on the way
(``python -c``, a script written then run, a Makefile recipe, ``sed -i`` inserting a line) comes
here, is read by its language's reader (``pycode``, ``foreign``) and may hand shell text back
(``subprocess.run("...")``, ``system(...)``, a ``.sh`` file). That shell text is walked by the
walker the ``Findings`` was made with (``Findings(ShellWalker)``), which keeps this module below
the walker in the import graph.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from guard.normalize import budget
from guard.normalize.budget import Unparseable
from guard.normalize.foreign import foreign_facts
from guard.normalize.forgery import raises_limit, writes_pass_marker
from guard.normalize.languages import lang_for_path
from guard.normalize.pycode import python_facts
from guard.normalize.words import c_unescape
from guard.paths import WORKSPACE, absolute
from guard.types import CodeBlock, Command, Effect

MAX_NESTING = 6  # bash -c inside eval inside base64 inside ...
MAX_CODE_CHARS = 128 * 1024
_CHECK = re.compile(r"\bassert\w*\b|pytest\.raises|\.fail\(")
_COMMENTED_CHECK = re.compile(r"#\s*(assert\w*\b|self\.assert|with pytest\.raises)")
_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+test\w*\s*\(", re.M)


class ShellReader(Protocol):
    """What reading code needs of the shell walker: run a script, or one command's argv."""

    def run(self, script: str, stdin: str | None = None) -> str | None: ...

    def dispatch(
        self, argv: list[str], stdin: str | None, level: int, source: str | None = None
    ) -> str | None: ...


# (findings, depth, source, cwd) -> a walker recording into those findings
ShellReaderFactory = Callable[["Findings", int, str, str], ShellReader]


@dataclass
class Findings:
    """Everything one call does, gathered across all nesting levels."""

    shell_walker: ShellReaderFactory = field(repr=False)  # reads shell text found in code
    commands: list[Command] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    blocks: list[CodeBlock] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # absolute path -> content written here
    effects: list[Effect] = field(
        default_factory=list
    )  # what the call reads and changes (guard.normalize.effects)
    nodes: int = 0
    # byte range of the top-level simple command being read: commands found inside it (nested
    # shells, decoded payloads, code it runs) carry it, so a decoy can stand in for that command
    span: tuple[int, int] | None = None
    scanned: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    # what each scanned block would do when run (its effects), for a block written and run in one call
    scanned_effects: dict[tuple[str, str], tuple[Effect, ...]] = field(default_factory=dict)

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
            if origin == "run":  # now what it does happens
                self.effects.extend(self.scanned_effects.get((lang, text), ()))
            return
        mark = len(self.effects)
        code_effects: list[tuple[str, str, str | None]] = []
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
                sub = self.shell_walker(self, depth + 1, "python subprocess", cwd)
                if isinstance(item, list):
                    sub.dispatch(item, None, depth + 1)
                else:
                    sub.run(item)
            for inner in pf.python:
                self.add_code("python", inner, origin, None, depth + 1, cwd)
            if origin == "run":  # files code run by the call writes are the call's writes
                for written, content in pf.written:
                    self.note_write(written, content, cwd, depth + 1)
            code_effects = pf.effects
        elif lang == "shell":
            source = f"{origin}:{path}" if origin == "write" else "script"
            self.shell_walker(self, depth + 1, source, cwd).run(text)
        elif lang == "make":
            # recipe lines are shell commands; ``@``/``-`` prefixes only change echo and errors
            recipes = [line.lstrip("\t").lstrip("@-+") for line in text.splitlines() if line.startswith("\t")]
            self.shell_walker(self, depth + 1, f"{origin}:{path}", cwd).run("\n".join(recipes))
        elif lang not in ("config", "text"):
            ff = foreign_facts(lang, text)
            facts = ff.facts
            for p in ff.paths:
                self.add_path(p, cwd)
            code_effects = ff.effects
            for cmd in ff.shell:
                self.shell_walker(self, depth + 1, f"{lang} system", cwd).run(c_unescape(cmd))
        self.add_code_effects(code_effects, cwd)
        produced = self.effects[mark:]
        self.scanned_effects[(lang, text)] = tuple(e for e in produced if not e.deferred)
        if origin == "write":  # nothing of it runs now: what it does is for later
            self.effects[mark:] = [e if e.deferred else e._replace(deferred=True) for e in produced]
        unique = tuple(dict.fromkeys(facts))
        self.scanned[(lang, text)] = unique
        self.blocks.append(CodeBlock(lang, text, origin, path, unique))

    def add_code_effects(self, effects: list[tuple[str, str, str | None]], cwd: str) -> None:
        """File operations of code the call runs (``open(p, "w")``, ``os.remove``, ``fs.writeFileSync``):
        paths resolved against the working directory, unknown parts (``{}``) kept as globs."""
        for op, raw, source in effects:
            path = raw.replace("{}", "*")
            if not path or "\n" in path or len(path) > 4096:
                continue
            tree = op.endswith("*")  # os.walk, shutil.rmtree, copytree: the whole tree below
            op = op.rstrip("*")
            src = absolute(source.replace("{}", "*"), cwd) if source else None
            recursive = tree or op == "move" or (op == "delete" and path.endswith("/"))
            self.effects.append(Effect(op, absolute(path, cwd), recursive, src))

    def note_edit(self, full: str, old: str, new: str, depth: int) -> None:
        """An in-place change of ``full`` from ``old`` to ``new`` (edit_file, a patch hunk): the
        write, what it removes (all asserts, ``def test_*``), and ``new`` scanned as code."""
        self.add_path(full)
        self.facts.append(f"write:{full}")
        self.facts.append(f"edit:{full}")  # changes a file that exists: the project's own code
        self.effects.append(Effect("write", full))
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
        if raises_limit(old, new):
            self.facts.append(f"raises_limit:{full}")
        lang = lang_for_path(full)
        if lang and new.strip():
            self.add_code(lang, textwrap.dedent(new), "write", full, depth, WORKSPACE)

    def note_write(self, path: str, content: str | None, cwd: str, depth: int) -> None:
        """A file written (or truncated) by the call; its content is scanned as code when known."""
        full = self.add_path(path, cwd)
        self.facts.append(f"write:{full}")
        self.effects.append(Effect("write", full))
        if content is None:
            return
        if not content.strip():
            self.facts.append(f"write_empty:{full}")
        elif writes_pass_marker(full, content):
            self.facts.append(f"writes_pass_marker:{full}")
        self.files[full] = content
        lang = lang_for_path(full)
        if lang:
            self.add_code(lang, content, "write", full, depth, cwd)


def _assert_count(text: str) -> int:
    """Checks in live code: a commented-out assert no longer counts."""
    return sum(len(_CHECK.findall(line.split("#", 1)[0])) for line in text.splitlines())
