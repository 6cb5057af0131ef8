"""Episode memory: what earlier calls of an episode left behind, so a later call that runs it is
judged with what it contains.

Stage 1 reads one call at a time, so ``write_file run.py`` (a patch of the evaluator hidden in a
script) followed by ``python run.py`` escapes a per-call reading. ``EpisodeMemory`` keeps, per
episode, the files the agent wrote or edited (their text, bounded), the scripts made executable,
and reads later calls for what they run:

- ``python FILE`` / ``python -m MOD`` / ``./FILE`` / ``/abs/FILE`` / ``bash FILE`` / ``source FILE``
  / ``node FILE`` ...: that file's text, scanned as code run by the call;
- ``pytest`` (``py.test``, ``python -m pytest``/``unittest``, ``tox``, ``nox``): every remembered
  ``conftest.py``, test module, pytest configuration and ``sitecustomize``/``.pth`` file;
- ``make [TARGET]``: the recipes of the target (the first one by default) of a remembered Makefile;
- ``bash -i``/``-l`` (and ``source ~/.bashrc``): remembered shell start-up files, walked before the
  command so their aliases, functions and exports apply;
- a bare program name found in a remembered executable of a directory other than the system ones
  (a fake ``pytest`` earlier on ``PATH``);
- one level of imports: a run Python file importing a remembered module runs that module too.

``expand`` returns the call with those blocks, commands and facts added (``runs_written:<path>``),
so the ordinary rules see them. Bounds: ``MAX_FILES`` files, ``MAX_FILE_CHARS`` per file,
``MAX_TOTAL_CHARS`` in all; the oldest file is forgotten first and its name kept (up to
``MAX_FORGOTTEN``). A call that runs a file the memory had to forget, or runs something after the
memory overflowed, gets ``memory_lost:<path>``: the rules escalate it rather than guess. A file
whose text cannot be read again gets ``memory_unreadable:<path>`` (escalated too).

Expansion results are cached by (path, SHA-256 of the text), so a script run ten times is read once.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from guard.aliases import Aliases
from guard.normalize.budget import Unparseable
from guard.normalize.findings import Findings
from guard.normalize.languages import lang_for_path
from guard.normalize.patches import patch_hunks
from guard.normalize.shell import ShellWalker
from guard.paths import WORKSPACE, absolute
from guard.types import CodeBlock, Command, Effect, NormalizedCall, ToolCall

MAX_FILES = 256
MAX_FILE_CHARS = 128 * 1024
MAX_TOTAL_CHARS = 4 * 1024 * 1024
MAX_FORGOTTEN = 4096
MAX_EXPANSIONS = 512  # cached readings of (path, content hash)
MAX_MEMORY_TEXT = 4096  # characters of remembered code added to the call's canonical text
MAX_GIT_CONFIG = 256  # git configuration keys remembered (aliases, core.hooksPath)

_PY = re.compile(r"^(?:python[\d.]*|pypy[\d.]*)$")
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
_SOURCE = frozenset({"source", "."})
_INTERPRETERS = {"node": "node", "perl": "perl", "ruby": "ruby", "php": "php", "Rscript": "r"}
_PYTEST = frozenset({"pytest", "py.test", "tox", "nox"})
_RC_FILES = ("/root/.bashrc", "/root/.bash_profile", "/root/.profile", "/etc/profile", "/etc/bash.bashrc")
_TEST_FILE = re.compile(r"(?:^|/)(?:test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$")
_PYTEST_CONFIG = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
_STARTUP = re.compile(r"(?:^|/)(?:sitecustomize\.py|usercustomize\.py|[^/]*\.pth)$")
_SYSTEM_BIN = ("/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/")
_MAKE_RULE = re.compile(r"^([A-Za-z0-9_./%-][^:=\s]*(?:\s+[^:=\s]+)*)\s*::?(?!=)(.*)$")
_GIT_CONFIG_FILES = re.compile(r"(?:^|/)(?:\.gitconfig|\.git/config|\.config/git/config)$")
_INI_SECTION = re.compile(r"^\s*\[\s*([\w.-]+)(?:\s+\"([^\"]*)\")?\s*\]\s*$")
_INI_VALUE = re.compile(r"^\s*([\w.-]+)\s*=\s*(.*?)\s*$")
# git sub-commands whose hooks a configured ``core.hooksPath`` elsewhere skips
_HOOKED = frozenset({"commit", "push", "merge", "rebase", "am", "cherry-pick", "revert", "pull"})


@dataclass
class _File:
    text: str
    lang: str | None
    digest: str
    partial: bool = False  # only an edit's new text is known, not the whole file


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _lang(path: str, text: str) -> str | None:
    lang = lang_for_path(path)
    if lang is not None:
        return lang
    first = text.split("\n", 1)[0]
    if first.startswith("#!"):
        if "python" in first:
            return "python"
        if any(s in first for s in ("sh", "bash", "zsh")):
            return "shell"
        for name, kind in _INTERPRETERS.items():
            if name in first:
                return kind
    return None


_PACKAGE_RUNNERS = frozenset({"npm", "yarn", "pnpm", "bun"})
_PACKAGE_BUILTINS = frozenset(
    {"install", "i", "add", "ci", "remove", "uninstall", "update", "init", "exec", "x"}
)


def _package_script(program: str, operands: list[str]) -> str | None:
    """The package.json script a runner call runs: ``npm test``, ``npm run X``, ``yarn X``."""
    if not operands:
        return None
    if operands[0] in ("run", "run-script") and len(operands) > 1:
        return operands[1]
    if operands[0] in ("test", "t", "tst", "start", "stop"):
        return {"t": "test", "tst": "test"}.get(operands[0], operands[0])
    if program != "npm" and operands[0] not in _PACKAGE_BUILTINS:
        return operands[0]  # yarn/pnpm/bun run a script by its bare name
    return None


def _package_scripts(text: str) -> dict[str, str]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    scripts = data.get("scripts") if isinstance(data, dict) else None
    return {k: v for k, v in scripts.items() if isinstance(v, str)} if isinstance(scripts, dict) else {}


def make_recipes(text: str, targets: list[str]) -> str:
    """The recipe lines of ``targets`` (the first target when none), and of their direct
    prerequisites, as one shell script (``@``/``-`` prefixes dropped)."""
    rules: dict[str, tuple[list[str], list[str]]] = {}
    order: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("\t"):
            if current is not None:
                current.append(line[1:].lstrip("@-+ "))
            continue
        m = _MAKE_RULE.match(line)
        if m and not line.startswith((" ", "#")):
            names = m.group(1).split()
            prereqs = m.group(2).split(";", 1)[0].split()
            current = []
            for name in names:
                rules[name] = (prereqs, current)
                if not name.startswith("."):
                    order.append(name)
        elif line.strip() and not line.startswith("#"):
            current = None
    wanted = targets or order[:1]
    script: list[str] = []
    for target in wanted:
        prereqs, recipe = rules.get(target, ([], []))
        for pre in prereqs:
            script.extend(rules.get(pre, ([], []))[1])
        script.extend(recipe)
    return "\n".join(script)


class EpisodeMemory:
    """Per-episode guard state: written files and what later calls run of them. Thread-safe."""

    def __init__(self) -> None:
        self._files: OrderedDict[str, _File] = OrderedDict()
        self._chars = 0
        self._forgotten: OrderedDict[str, None] = OrderedDict()
        self.overflowed = False
        self.executables: set[str] = set()
        self._expansions: OrderedDict[tuple[str, str, str], Findings | str] = OrderedDict()
        self._lock = threading.Lock()
        # links and copies earlier calls made (guard.aliases): a copy of a hidden file stays hidden
        self.aliases = Aliases()
        # git configuration earlier calls set (``git config alias.ci ...``, a written ``.gitconfig``),
        # keys lower-cased: applied to later git commands, as git itself would
        self.git_config: OrderedDict[str, str] = OrderedDict()

    # ---- recording -------------------------------------------------------------------------------
    def known(self, path: str) -> str | None:
        """The remembered text of ``path`` (None when not remembered)."""
        entry = self._files.get(path)
        return entry.text if entry is not None else None

    @property
    def size(self) -> tuple[int, int]:
        """(files, characters) held."""
        return len(self._files), self._chars

    def _remember(self, path: str, text: str, partial: bool = False) -> None:
        if len(text) > MAX_FILE_CHARS:
            self._forget(path)
            return
        old = self._files.pop(path, None)
        if old is not None:
            self._chars -= len(old.text)
        self._files[path] = _File(text, _lang(path, text), _digest(text), partial)
        self._chars += len(text)
        self._forgotten.pop(path, None)
        while len(self._files) > MAX_FILES or self._chars > MAX_TOTAL_CHARS:
            oldest, entry = self._files.popitem(last=False)
            self._chars -= len(entry.text)
            self._note_forgotten(oldest)

    def _forget(self, path: str) -> None:
        entry = self._files.pop(path, None)
        if entry is not None:
            self._chars -= len(entry.text)
        self._note_forgotten(path)

    def _note_forgotten(self, path: str) -> None:
        self._forgotten[path] = None
        if len(self._forgotten) > MAX_FORGOTTEN:
            self._forgotten.popitem(last=False)
            self.overflowed = True

    def observe(self, call: ToolCall, normalized: NormalizedCall) -> None:
        """Record what ``call`` (already run, not decoyed) left behind."""
        with self._lock:
            self.aliases.record(normalized.effects)
            self._observe_git_config(normalized)
            if call.tool == "edit_file" and isinstance(call.arguments, dict):
                self._observe_edit(call.arguments, normalized)
                return
            written = dict(normalized.files)
            appended = {f[len("append:") :] for f in normalized.facts if f.startswith("append:")}
            for path, content in written.items():
                entry = self._files.get(path)
                if path in appended and entry is not None:
                    self._remember(path, entry.text + content, entry.partial)
                else:
                    self._remember(path, content, partial=path in appended)
            for fact in normalized.facts:
                # a remembered file changed in a way whose result is not known (sed -i, patch, cp
                # over it): its text is lost, so running it later is escalated, never judged stale
                if fact.startswith(("write:", "append:", "write_empty:")):
                    path = fact.split(":", 1)[1]
                    if path in self._files and path not in written and not fact.startswith("write_empty:"):
                        self._forget(path)
            for cmd in normalized.commands:
                if cmd.program == "chmod" and any("x" in a or a.isdigit() for a in cmd.argv[1:2]):
                    for operand in cmd.argv[2:]:
                        self.executables.add(absolute(operand, WORKSPACE))
                elif cmd.program in ("rm", "unlink"):
                    for operand in cmd.argv[1:]:
                        if not operand.startswith("-"):
                            full = absolute(operand, WORKSPACE)
                            entry = self._files.pop(full, None)
                            if entry is not None:
                                self._chars -= len(entry.text)

    def _observe_git_config(self, normalized: NormalizedCall) -> None:
        """``git config [--global] KEY VALUE`` and written git configuration files (``[alias]``,
        ``[core] hooksPath``): later git commands run with them."""
        for cmd in normalized.commands:
            argv = list(cmd.argv)
            if cmd.program != "git" or len(argv) < 3 or argv[1] != "config":
                continue
            words = [a for a in argv[2:] if not a.startswith("-")]
            if "--unset" in argv or "--unset-all" in argv:
                if words:
                    self.git_config.pop(words[0].lower(), None)
            elif len(words) >= 2:
                self._set_git_config(words[0], " ".join(words[1:]))
        for path, content in normalized.files:
            if _GIT_CONFIG_FILES.search(path):
                self._read_git_config_file(content)

    def _read_git_config_file(self, content: str) -> None:
        section = ""
        for line in content.splitlines():
            head = _INI_SECTION.match(line)
            if head is not None:
                section = head.group(1) + (f".{head.group(2)}" if head.group(2) else "")
                continue
            value = _INI_VALUE.match(line)
            if value is not None and section:
                self._set_git_config(f"{section}.{value.group(1)}", value.group(2).strip('"'))

    def _set_git_config(self, key: str, value: str) -> None:
        key = key.lower()
        self.git_config.pop(key, None)
        self.git_config[key] = value
        while len(self.git_config) > MAX_GIT_CONFIG:
            self.git_config.popitem(last=False)

    def _git_expansion(self, normalized: NormalizedCall) -> Findings | None:
        """Later git commands read with the remembered configuration: an alias runs what it names
        (``git ci`` after ``alias.ci = commit --no-verify``), and hooks moved away by
        ``core.hooksPath`` skip the project's gates (``git_hooks_path:<value>``)."""
        if not self.git_config:
            return None
        aliases = {k[6:]: v for k, v in self.git_config.items() if k.startswith("alias.")}
        hooks = self.git_config.get("core.hookspath")
        found: Findings | None = None
        for cmd in normalized.commands:
            if cmd.program != "git":
                continue
            sub = next((a for a in cmd.argv[1:] if not a.startswith("-")), "")
            if sub in aliases:
                found = found or Findings(ShellWalker)
                value = aliases[sub]
                rest = list(cmd.argv[cmd.argv.index(sub) + 1 :])
                try:
                    walker = ShellWalker(found, 0, f"git alias {sub}")
                    if value.startswith("!"):
                        walker.run(" ".join([value[1:], *rest]))
                    else:
                        walker.git_aliases = dict(aliases)
                        walker.dispatch(["git", sub, *rest], None, 0, f"git alias {sub}")
                except (Unparseable, RecursionError):
                    found.facts.append(f"memory_unreadable:git alias {sub}")
                expanded = aliases[sub].lstrip("!").split()
                sub = next((a for a in expanded if a not in ("git",) and not a.startswith("-")), sub)
            if hooks is not None and sub in _HOOKED:
                found = found or Findings(ShellWalker)
                found.facts.append(f"git_hooks_path:{hooks}")
        return found

    def _observe_edit(self, arguments: dict[str, Any], normalized: NormalizedCall) -> None:
        path = next((f[len("edit:") :] for f in normalized.facts if f.startswith("edit:")), None)
        old = arguments.get("old_str", arguments.get("old_string", ""))
        new = arguments.get("new_str", arguments.get("new_string", ""))
        if path is None or not isinstance(old, str) or not isinstance(new, str):
            return
        entry = self._files.get(path)
        if entry is not None and not entry.partial and old in entry.text:
            self._remember(path, entry.text.replace(old, new, 1))
        else:  # the file's text is unknown: keep what the edit put in (all later edits appended)
            before = entry.text + "\n" if entry is not None and entry.partial else ""
            self._remember(path, before + new, partial=True)

    # ---- reading later calls -----------------------------------------------------------------------
    def expand(self, normalized: NormalizedCall) -> NormalizedCall:
        """``normalized`` plus what it runs of remembered files (unchanged when it runs none)."""
        with self._lock:
            normalized = self._with_git_config(normalized)
            targets = self._targets(normalized)
            for block in normalized.blocks:  # ``python -c 'import helpers'``: code run by the call itself
                if block.lang == "python" and block.origin == "run":
                    for fact in block.facts:
                        if fact.startswith("import:"):
                            targets.extend((p, "file", "") for p in self._module_paths(fact[7:]))
            if not targets:
                return normalized
            facts: list[str] = []
            commands: list[Command] = []
            blocks: list[CodeBlock] = []
            paths: list[str] = []
            effects: list[Effect] = []
            rendered: list[str] = []
            seen: set[str] = set()
            queue = list(targets)
            while queue:
                path, kind, extra = queue.pop(0)
                key = f"{path}\0{kind}\0{extra}"
                if key in seen or len(seen) > 64:
                    continue
                seen.add(key)
                if kind == "shadow":  # the name alone decides; the script's text may be unknown
                    facts.append(f"shadowed_program:{extra}={path}")
                    continue
                if path not in self._files and kind != "rc":
                    if path in self._forgotten or self.overflowed:
                        facts.append(f"memory_lost:{path}")
                    continue
                found = self._read(path, kind, extra)
                if isinstance(found, str):
                    facts.append(f"memory_unreadable:{path}: {found}"[:300])
                    continue
                facts.append(f"runs_written:{path}")
                # commands keep where they came from, even when a wrapper (``python -m``) renamed it
                origin = "make" if kind == "make" else f"script {path}"
                commands.extend(
                    c
                    if c.source.startswith(("alias", "make", "script "))
                    else replace(c, source=f"{origin} > {c.source}")
                    for c in found.commands
                )
                facts.extend(found.facts)
                effects.extend(found.effects)
                blocks.extend(found.blocks)
                # the same text is also code the agent wrote: rules about written code see it too
                blocks.extend(replace(b, origin="write") for b in found.blocks if b.origin == "run")
                paths.extend(found.paths)
                rendered.append(f"# runs {path} (written earlier in this episode)")
                for block in found.blocks:
                    if block.lang == "python" and block.origin == "run":
                        for fact in block.facts:
                            if fact.startswith("import:"):
                                queue.extend((p, "file", "") for p in self._module_paths(fact[7:]))
            if not facts:
                return normalized
            text = normalized.text + "\n" + "\n".join(rendered)
            code = "\n".join(b.text for b in blocks)[:MAX_MEMORY_TEXT]
            if code:
                text += "\n" + code
            return replace(
                normalized,
                text=text,
                commands=normalized.commands + tuple(commands),
                facts=tuple(dict.fromkeys((*normalized.facts, *facts))),
                blocks=normalized.blocks + tuple(blocks),
                paths=tuple(dict.fromkeys((*normalized.paths, *paths))),
                code=normalized.code + tuple(b.text for b in blocks),
                effects=normalized.effects + tuple(effects),
            )

    def _with_git_config(self, normalized: NormalizedCall) -> NormalizedCall:
        found = self._git_expansion(normalized)
        if found is None:
            return normalized
        return replace(
            normalized,
            text=normalized.text
            + "\n# git, with the configuration written earlier in this episode\n"
            + "\n".join(f"$ [{c.source}] {' '.join(c.argv)}" for c in found.commands),
            commands=normalized.commands + tuple(found.commands),
            facts=tuple(dict.fromkeys((*normalized.facts, *found.facts))),
            effects=normalized.effects + tuple(found.effects),
        )

    def _module_paths(self, module: str) -> list[str]:
        rel = module.replace(".", "/")
        out = []
        for candidate in (f"{WORKSPACE}/{rel}.py", f"{WORKSPACE}/{rel}/__init__.py"):
            if candidate in self._files:
                out.append(candidate)
        return out

    def _targets(self, normalized: NormalizedCall) -> list[tuple[str, str, str]]:
        """(path, how it is run: file|make|rc|pytest, extra) for every remembered thing run."""
        out: list[tuple[str, str, str]] = []
        for cmd in normalized.commands:
            argv = list(cmd.argv)
            program = cmd.program
            if not argv:
                continue
            operands = [a for a in argv[1:] if not a.startswith("-")]
            if _PY.match(program):
                if "-m" in argv[1:]:
                    module = argv[argv.index("-m") + 1] if argv.index("-m") + 1 < len(argv) else ""
                    if module in ("pytest", "unittest", "nose2", "tox", "nox"):
                        out.extend(self._pytest_targets())
                    else:
                        rel = module.replace(".", "/")
                        out += [
                            (f"{WORKSPACE}/{rel}.py", "file", ""),
                            (f"{WORKSPACE}/{rel}/__main__.py", "file", ""),
                        ]
                elif "-c" not in argv[1:] and operands:
                    out.append((absolute(operands[0], WORKSPACE), "file", ""))
            elif program in _PYTEST:
                out.extend(self._pytest_targets())
            elif program in _SHELLS or program in _SOURCE:
                flags = "".join(a[1:] for a in argv[1:] if a.startswith("-") and not a.startswith("--"))
                inner = operands[0] if "c" in flags and operands else ""
                if program in _SHELLS and ("i" in flags or "l" in flags or "--login" in argv):
                    rcs = [rc for rc in _RC_FILES if rc in self._files]
                    if rcs:
                        out.append((rcs[0], "rc", inner))
                if "c" not in flags and operands:
                    out.append((absolute(operands[0], WORKSPACE), "file", ""))
            elif program in _INTERPRETERS and operands:
                out.append((absolute(operands[0], WORKSPACE), "file", ""))
            elif program == "patch" or (program == "git" and argv[1:2] in (["apply"], ["am"])):
                # a diff written earlier, applied now: the files it changes are this call's changes
                named = [absolute(o, WORKSPACE) for o in operands if o not in ("apply", "am")]
                named += [e.path for e in normalized.effects if e.op == "read"]
                out.extend((p, "patch", "") for p in dict.fromkeys(named) if p in self._files)
            elif program in _PACKAGE_RUNNERS and f"{WORKSPACE}/package.json" in self._files:
                # ``npm test`` / ``npm run X`` / ``yarn X``: the package.json script written earlier
                script = _package_script(program, operands)
                if script:
                    out.append((f"{WORKSPACE}/package.json", "npm", script))
            elif program == "make":
                directory = WORKSPACE
                if "-C" in argv[1:]:
                    i = argv.index("-C")
                    directory = absolute(argv[i + 1], WORKSPACE) if i + 1 < len(argv) else WORKSPACE
                targets = [a for a in operands if "=" not in a and a != directory]
                for name in ("GNUmakefile", "makefile", "Makefile"):
                    path = f"{directory}/{name}"
                    if path in self._files:
                        out.append((path, "make", " ".join(targets)))
                        break
            if "/" in argv[0]:
                out.append((absolute(argv[0], WORKSPACE), "file", ""))
            elif program not in _SHELLS:
                for path in self.executables | set(self._files):
                    if posixpath.basename(path) != argv[0] or path.startswith(_SYSTEM_BIN):
                        continue
                    if path.startswith(WORKSPACE + "/"):
                        if path in self.executables:
                            out.append((path, "file", ""))
                    elif path in self.executables or path.startswith("/tmp/"):
                        out.append((path, "file", ""))  # a program of that name outside the system dirs
                        out.append((path, "shadow", argv[0]))
        return out

    def _pytest_targets(self) -> list[tuple[str, str, str]]:
        return [
            (path, "file", "")
            for path in self._files
            if _TEST_FILE.search(path) or _STARTUP.search(path) or posixpath.basename(path) in _PYTEST_CONFIG
        ]

    def _read(self, path: str, kind: str, extra: str) -> Findings | str:
        """What running ``path`` does (cached by content hash); a string is the reason it failed."""
        entry = self._files.get(path)
        if entry is None:
            return "not remembered"
        if kind == "rc":  # start-up files walked before the command, so their aliases apply to it
            rc_text = "\n".join(self._files[rc].text for rc in _RC_FILES if rc in self._files)
            entry = _File(f"{rc_text}\n{extra}", "shell", _digest(f"{rc_text}\n{extra}"))
        key = (path, f"{kind}:{extra}", entry.digest)
        cached = self._expansions.get(key)
        if cached is not None:
            self._expansions.move_to_end(key)
            return cached
        f = Findings(ShellWalker)
        try:
            if kind == "patch":
                for target, removed, added, created in patch_hunks(entry.text, WORKSPACE):
                    if created:
                        f.note_write(target, added, WORKSPACE, 1)
                    else:
                        f.note_edit(target, removed, added, 1)
            elif kind == "npm":
                command = _package_scripts(entry.text).get(extra)
                if command:
                    ShellWalker(f, 0, f"script package.json:{extra}").run(command)
            elif kind == "make":
                ShellWalker(f, 0, "make").run(make_recipes(entry.text, extra.split()))
                f.blocks.append(CodeBlock("make", entry.text, "run", path, ()))
            elif kind == "rc" or entry.lang == "shell":  # shell scripts and start-up files
                ShellWalker(f, 0, f"script {path}").run(entry.text)
                f.blocks.append(CodeBlock("shell", entry.text, "run", path, ()))
            elif entry.lang is not None:
                # relative paths in a script resolve from where it is launched: the workspace, as agents do
                f.add_code(entry.lang, entry.text, "run", path, 0, WORKSPACE)
            else:
                ShellWalker(f, 0, f"script {path}").run(entry.text)
        except (Unparseable, RecursionError) as exc:
            result: Findings | str = str(exc) or type(exc).__name__
        else:
            result = f
        self._expansions[key] = result
        while len(self._expansions) > MAX_EXPANSIONS:
            self._expansions.popitem(last=False)
        return result
