"""Bash, as the shell would run it: what each simple command does.

A bash text is parsed by tree-sitter-bash (``guard.normalize.shell_syntax``) and walked statement
by statement (``guard.normalize.shell_statements``); every simple command, its words expanded,
comes to ``ShellWalker.dispatch`` here. It records the command, the paths it names and the file
changes it makes (``guard.normalize.command_files``, ``guard.normalize.effects``), sees through
wrappers (``env``, ``sudo``, ``xargs``, ``timeout``) and git's global options, keeps what changes
later commands (``cd``, ``alias``, ``export``), runs pure text stages statically
(``guard.normalize.decode``) and reads what runs nested: ``bash -c``, ``eval``, ``source``, a
script written earlier in the call, ``python -c`` and other interpreters' code (through
``Findings.add_code``). Nesting recurses with a depth bound; everything lands in one ``Findings``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from guard.normalize import budget, programs
from guard.normalize.budget import Unparseable
from guard.normalize.command_files import command_paths, edits_in_place, file_change_facts, sed_inserted_text
from guard.normalize.decode import static_output
from guard.normalize.effects import command_effects
from guard.normalize.effects_placement import find_selection
from guard.normalize.findings import Findings
from guard.normalize.forgery import is_printed_verdict, raises_limit, substitutions
from guard.normalize.git_argv import GIT_EXEC_KEYS, canonical_git, git_config_pairs
from guard.normalize.languages import lang_for_path
from guard.normalize.patches import patch_hunks
from guard.normalize.shell_statements import NULL_SINKS, StatementWalker
from guard.normalize.shell_syntax import parse_tree
from guard.paths import WORKSPACE, absolute
from guard.types import Command

MAX_COMMANDS = 1_000
_GLOB = re.compile(r"[*?\[]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


class ShellWalker(StatementWalker):
    """Walks one shell script; nested scripts get their own walker over the same ``Findings``."""

    def __init__(self, findings: Findings, depth: int, source: str, cwd: str = WORKSPACE) -> None:
        super().__init__(findings, depth, source, cwd)
        self.aliases: dict[str, str] = {}
        self.git_aliases: dict[str, str] = {}

    # ---- entry -------------------------------------------------------------------------------
    def run(self, script: str, stdin: str | None = None) -> str | None:
        budget.charge(len(script), "nested shell")  # each nested eval/bash -c is parsed anew
        first = len(self.f.commands)
        out = self.stmt(parse_tree(script), stdin, 0)
        if self.source.startswith(("write:", "script")):
            self.note_fake_verdict(first)
        return out

    def note_fake_verdict(self, first: int) -> None:
        """A script that prints a pass verdict while running nothing that checks (``echo "All
        tests passed"; exit 0`` as the test script): ``prints_pass_marker``."""
        ran = [c for c in self.f.commands[first:] if c.source == self.source]
        verdicts = [
            c
            for c in ran
            if c.program in ("echo", "printf")
            and is_printed_verdict(" ".join(a for a in c.argv[1:] if not a.startswith("-")))
        ]
        if verdicts and all(c.program in _INERT for c in ran):
            self.f.facts.append("prints_pass_marker")

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
            for key, value in git_config_pairs(argv):
                if key.lower() == "core.hookspath":
                    self.f.facts.append(f"git_hooks_path:{value}")  # hooks looked up elsewhere (or nowhere)
                elif key.lower() in GIT_EXEC_KEYS or (key.startswith("alias.") and value.startswith("!")):
                    self.nested(value.lstrip("!"), None, f"git -c {key}")
            argv = canonical_git(argv, self.git_aliases)
            if argv[1:3] == ["config"] or (len(argv) > 2 and argv[1] == "config"):
                rest = [a for a in argv[2:] if not a.startswith("-")]
                if len(rest) >= 2 and rest[0].startswith("alias."):
                    self.git_aliases[rest[0][6:]] = " ".join(rest[1:])
                elif len(rest) >= 2 and rest[0].lower() == "core.hookspath":
                    self.f.facts.append(f"git_hooks_path:{' '.join(rest[1:])}")
                elif len(rest) >= 2 and rest[0].lower() in GIT_EXEC_KEYS:
                    self.nested(" ".join(rest[1:]), None, f"git config {rest[0]}")
        self.f.commands.append(Command(name, tuple(argv), source, self.f.span))
        self.f.paths.extend(command_paths(name, argv, self.cwd))
        if name not in programs.WRAPPERS and name not in _OWN_EFFECTS:
            self.f.effects.extend(command_effects(argv, self.cwd, word))

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
            elif name == "xargs" and self.piped_find and inner:
                # ``find -name X | xargs CMD``: CMD gets what find selects (as globs), for its effects
                program = programs.program_name(inner[0])
                self.f.effects.extend(command_effects([program, *inner[1:], *self.piped_find], self.cwd))
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
        selected = find_selection(argv, self.cwd)
        self.found = selected
        for inner in programs.find_exec(argv):
            self.dispatch(inner, None, level, "find -exec")
            if "{}" in inner[1:]:  # what ``{}`` stands for: the files the expression selects
                for glob in selected:
                    name = programs.program_name(inner[0])
                    self.f.effects.extend(
                        command_effects([name, *(glob if a == "{}" else a for a in inner[1:])], self.cwd)
                    )
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
            if target not in NULL_SINKS:
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

    def note_file_effects(self, name: str, argv: list[str]) -> None:
        """Deletions, moves, truncations and in-place edits, as ``delete:``/``write:`` facts."""
        if not edits_in_place(name, argv):
            self.f.facts.extend(file_change_facts(name, argv, self.cwd))
            return
        operands = [a for a in argv[1:] if not a.startswith("-")]
        inserted = sed_inserted_text(argv) if name == "sed" else None
        raised = any(raises_limit(old, new) for a in argv[1:] for old, new in substitutions(a))
        for p in operands[1:]:
            full = absolute(p, self.cwd)
            self.f.facts.append(f"write:{full}")
            if raised:
                self.f.facts.append(f"raises_limit:{full}")
            lang = lang_for_path(full)
            if inserted and lang:  # sed -i '1i import os; os._exit(0)' pkg/__init__.py
                self.f.add_code(lang, inserted, "write", full, self.depth + 1, self.cwd)

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


# commands that check nothing: a script made only of them and a printed verdict forges one
_INERT = frozenset(
    {"echo", "printf", "exit", "true", ":", "sleep", "date", "touch", "mkdir", "return", "export", "set"}
)

# programs whose effects the walker records itself (tee writes through ``note_write``)
_OWN_EFFECTS = frozenset({"tee"})

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
