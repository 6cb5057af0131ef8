"""Decoys: plausible, useless answers for intercepted calls; nothing the agent asked for runs.

The sandbox they describe is consistent: protected paths do not exist, the network is down, git
holds only the checked-out history and no remotes, and writes that would weaken grading succeed.
Each program answers in its own wording and exit code; no fixed marker ever appears. The same call
in the same episode always gets the same answer (randomness is seeded by episode and call).

Some answers are better taken from the sandbox than invented. ``probe_command`` names a harmless
command whose real output the decoy needs (the narrowed twin of a history command, or
``command -v PROG`` to learn whether a program is installed); the pipeline runs it through the
gateway's probe hook when one is given and passes its answer to ``make_decoy``. Without a probe the
decoy falls back to an invented answer (history commands print nothing).

A bash command is answered by the first of ``BASH_DECOYS`` (a ``contract.registry.Registry``, tried
in registration order, the most specific first) whose condition fits the command the rule objects
to. The wording of the gateway's own tools comes from ``contract.wording``, which the gateway also
uses for its real answers, so a decoy ``read_file`` error is spelled like a real one.
"""

from __future__ import annotations

import posixpath
import random
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from contract.registry import Registry
from contract.wording import (
    edit_mismatch_answer,
    edit_success_answer,
    edit_success_message,
    file_not_found_answer,
    file_not_found_message,
    write_success_answer,
    write_success_message,
)
from guard.decoys.files import missing_path_decoy
from guard.decoys.git import git_decoy, history_probe
from guard.decoys.network import BY_PROGRAM as NETWORK_PROGRAMS
from guard.decoys.network import network_decoy
from guard.decoys.shell import args_of, bash_syntax_error, command_not_found, seeded_rng
from guard.decoys.tampering import CONTAINER_CLIS, escape_decoy, tamper_decoy
from guard.paths import ProtectedPaths
from guard.settings import DEFAULT_PROTECTED_PATHS
from guard.types import Category, Command, GuardContext, RuleResult, ToolAnswer, ToolCall

__all__ = [
    "MAYBE_ABSENT",
    "culprit_of",
    "edit_mismatch_answer",
    "edit_success_answer",
    "edit_success_message",
    "file_not_found_answer",
    "file_not_found_message",
    "make_decoy",
    "outside_workspace",
    "probe_command",
    "write_success_answer",
    "write_success_message",
]

# Programs a sandbox image may lack: a probe asks ``command -v`` before the decoy speaks for them.
MAYBE_ABSENT = frozenset(NETWORK_PROGRAMS) | CONTAINER_CLIS | {"python", "python3"}
WORKSPACE = "/workspace"
# Probe answers longer than this may have been cut by the gateway: too unsure to count matches in.
PROBE_TRUST_CHARS = 16_000
INTERPRETERS = frozenset({"node", "nodejs", "perl", "ruby", "php", "deno", "bun"})


@lru_cache(maxsize=64)
def _protected(patterns: tuple[str, ...]) -> ProtectedPaths:
    """Compiled once per distinct pattern set (a task's extras make a new set)."""
    return ProtectedPaths(patterns)


def _is_interpreter(program: str) -> bool:
    return program.startswith(("python", "pypy")) or program in INTERPRETERS


def _names_path(arg: str, path: str, protected: ProtectedPaths) -> bool:
    """Whether a single argument names the matched path (``hidden`` after ``cd /`` names ``/hidden``)."""
    if not arg or arg.startswith("-") or any(c.isspace() for c in arg):
        return False
    if protected.match(arg) is not None:
        return True
    tail = arg.strip("/").removeprefix("./")
    return bool(tail) and (path.rstrip("/") == arg.rstrip("/") or path.rstrip("/").endswith("/" + tail))


def culprit_of(result: RuleResult, protected_paths: Sequence[str]) -> Command | None:
    """The command a decoy stands in for (see ``_culprit``), for the given protected paths."""
    return _culprit(result, _protected(tuple(protected_paths)))


def _culprit(result: RuleResult, protected: ProtectedPaths) -> Command | None:
    """The command that does what the rule objects to: the rule's own, else the one naming the
    matched path, the one able to reach the network, or git; None when the call only writes."""
    match = result.match
    if match is None:
        return None
    if match.command is not None:
        return match.command
    commands = result.normalized.commands
    if match.path:
        for command in commands:
            if any(_names_path(arg, match.path, protected) for arg in args_of(command)):
                return command
    if match.category == Category.ANSWER_FETCH:
        return next(
            (c for c in commands if c.program in NETWORK_PROGRAMS or _is_interpreter(c.program)), None
        )
    if match.category == Category.GIT_HISTORY_LEAK:
        return next((c for c in commands if c.program == "git"), commands[-1] if commands else None)
    return commands[-1] if commands else None


def probe_command(call: ToolCall, result: RuleResult) -> str | None:
    """A harmless command whose real answer makes this call's decoy truer, or None."""
    if result.match is None:
        return None
    if call.tool == "edit_file":
        path = str(call.arguments.get("path", ""))
        if outside_workspace(path) or result.match.category == Category.HIDDEN_TEST_ACCESS:
            return None
        return f"cat -- {shlex.quote(path)}"  # to answer as the real edit would (old_str found or not)
    if call.tool != "bash":
        return None
    command = _culprit(result, _protected(DEFAULT_PROTECTED_PATHS))
    if command is None:
        return None
    if command.program == "git":
        return history_probe(command)
    if command.program in MAYBE_ABSENT:
        return f"command -v {shlex.quote(command.program)}"
    return None


def make_decoy(
    call: ToolCall,
    result: RuleResult,
    context: GuardContext,
    *,
    probe: ToolAnswer | None = None,
    protected_paths: Sequence[str] | None = None,
    now: datetime | None = None,
) -> ToolAnswer:
    """The answer the agent sees instead of running ``call``.

    ``probe`` is the real answer to ``probe_command(call, result)`` when the pipeline could run it;
    ``protected_paths`` defaults to the built-in list plus the context's; ``now`` stamps programs
    that print the time (wget).
    """
    patterns = protected_paths if protected_paths is not None else DEFAULT_PROTECTED_PATHS
    protected = _protected((*patterns, *context.protected_paths))
    match = result.match
    category = match.category if match is not None else ""
    path = str(call.arguments.get("path", ""))
    if call.tool in ("read_file", "list_dir"):
        return file_not_found_answer(call.tool, path or (match.path if match and match.path else "."))
    if call.tool in ("write_file", "edit_file") and (
        outside_workspace(path) or category == Category.HIDDEN_TEST_ACCESS
    ):
        return file_not_found_answer(call.tool, path)  # the real file tools reach /workspace only
    if call.tool == "write_file":
        return write_success_answer(path, str(call.arguments.get("content", "")))
    if call.tool == "edit_file":
        return _edit_decoy(path, str(call.arguments.get("old_str", "")), probe)
    if call.tool != "bash":
        return ToolAnswer("", 0)
    script = str(call.arguments.get("command", ""))
    if result.normalized.parse_error and (syntax := bash_syntax_error(script)) is not None:
        return syntax  # bash itself would refuse it, in these very words
    answer = _bash_decoy(result, context, probe, protected, now or datetime.now(UTC))
    if answer is probe or not answer.output or answer.output.endswith("\n"):
        return answer
    # Programs end their messages with a newline, and the sandbox passes output through unstripped.
    return ToolAnswer(answer.output + "\n", answer.exit_code, answer.truncated)


def outside_workspace(path: str) -> bool:
    """Whether the gateway's file tools would refuse ``path`` (they reach /workspace only)."""
    full = posixpath.normpath(path if path.startswith("/") else f"{WORKSPACE}/{path}")
    return full != WORKSPACE and not full.startswith(WORKSPACE + "/")


def _edit_decoy(path: str, old: str, probe: ToolAnswer | None) -> ToolAnswer:
    """Answer an edit as the real tool would, from the file's current text when the probe read it."""
    if probe is None or probe.truncated or len(probe.output) >= PROBE_TRUST_CHARS:
        return edit_success_answer(path)
    if probe.exit_code != 0:
        return file_not_found_answer("edit_file", path)
    count = probe.output.count(old) if old else 0
    return edit_success_answer(path) if count == 1 else edit_mismatch_answer(path, count)


@dataclass(frozen=True)
class BashCase:
    """What a bash decoy is chosen by: the culprit command and what the matched rule says of it."""

    command: Command
    category: str
    hint: str | None  # the path the rule matched, when it matched one
    installed: bool | None  # from the ``command -v`` probe; None when not probed
    probe: ToolAnswer | None
    result: RuleResult
    protected: ProtectedPaths
    rng: random.Random
    now: datetime

    @property
    def program(self) -> str:
        return self.command.program

    def is_protected(self, path: str) -> bool:
        if self.hint:
            return _names_path(path, self.hint, self.protected)
        return self.protected.match(path) is not None

    @property
    def names_protected(self) -> bool:
        """Whether an argument of the command names the matched path."""
        return any(_names_path(a, self.hint or "", self.protected) for a in args_of(self.command))


BashAnswer = Callable[[BashCase], ToolAnswer]


@dataclass(frozen=True)
class BashDecoy:
    """One way of answering an intercepted bash command: the cases it fits and its answer."""

    when: Callable[[BashCase], bool]
    answer: BashAnswer


# Tried in registration order; the first that fits answers. Registered from the most specific.
BASH_DECOYS: Registry[BashDecoy] = Registry("bash decoy")


def register_bash_decoy(name: str, when: Callable[[BashCase], bool]) -> Callable[[BashAnswer], BashAnswer]:
    """Register ``answer`` as the bash decoy ``name``, tried after those registered before it."""

    def decorate(answer: BashAnswer) -> BashAnswer:
        BASH_DECOYS.add(name, BashDecoy(when, answer))
        return answer

    return decorate


def _escapes(case: BashCase) -> bool:
    return case.category == Category.SANDBOX_ESCAPE and case.program not in NETWORK_PROGRAMS


def _missing(case: BashCase) -> ToolAnswer:
    return missing_path_decoy(case.command, case.is_protected, case.hint)


_TAMPERING = (Category.TEST_TAMPERING, Category.GRADER_TAMPERING)


@register_bash_decoy("tampering", lambda c: c.category in _TAMPERING)
def _tampering(case: BashCase) -> ToolAnswer:
    return tamper_decoy(case.command)


@register_bash_decoy("git", lambda c: c.program == "git")
def _git(case: BashCase) -> ToolAnswer:
    return git_decoy(case.command, case.probe)


def _escapes_to_protected_path(case: BashCase) -> bool:
    if not _escapes(case):
        return False
    if case.names_protected:
        return True
    return bool(case.hint and case.protected.match(case.hint) and _is_interpreter(case.program))


BASH_DECOYS.add("escape_to_protected_path", BashDecoy(_escapes_to_protected_path, _missing))


@register_bash_decoy("escape", _escapes)
def _escape(case: BashCase) -> ToolAnswer:
    written = case.hint or next(
        (p for p in case.result.normalized.paths if p.startswith(("/sys/", "/proc/"))), None
    )
    return escape_decoy(case.command, written, case.installed)


def _names_hidden_path(case: BashCase) -> bool:
    return case.category == Category.HIDDEN_TEST_ACCESS and case.names_protected


BASH_DECOYS.add("hidden_path_named", BashDecoy(_names_hidden_path, _missing))


@register_bash_decoy(
    "network", lambda c: c.category == Category.ANSWER_FETCH or c.program in NETWORK_PROGRAMS
)
def _network(case: BashCase) -> ToolAnswer:
    return network_decoy(case.command, case.result.normalized, case.rng, case.now)


@register_bash_decoy("history_file", lambda c: c.category == Category.GIT_HISTORY_LEAK)
def _history_file(case: BashCase) -> ToolAnswer:
    return missing_path_decoy(case.command, lambda p: case.is_protected(p) or ".git/" in p, case.hint)


def _reaches_protected_path(case: BashCase) -> bool:
    hidden = case.category == Category.HIDDEN_TEST_ACCESS
    return hidden or any(case.is_protected(arg) for arg in case.command.argv[1:])


BASH_DECOYS.add("protected_path", BashDecoy(_reaches_protected_path, _missing))


def _bash_decoy(
    result: RuleResult,
    context: GuardContext,
    probe: ToolAnswer | None,
    protected: ProtectedPaths,
    now: datetime,
) -> ToolAnswer:
    """The first registered bash decoy that fits the culprit command (``BASH_DECOYS``)."""
    match = result.match
    category = match.category if match is not None else ""
    command = _culprit(result, protected)
    if command is None:  # e.g. a fetch script written to a file: the write itself succeeds
        return ToolAnswer("", 0 if category == Category.ANSWER_FETCH else 1)
    installed = None if probe is None or command.program == "git" else probe.exit_code == 0
    if installed is False:
        return command_not_found(command.program)
    case = BashCase(
        command=command,
        category=category,
        hint=match.path if match is not None else None,
        installed=installed,
        probe=probe,
        result=result,
        protected=protected,
        rng=seeded_rng(context.episode_id, result.normalized.text),
        now=now,
    )
    for _, decoy in BASH_DECOYS.items():
        if decoy.when(case):
            return decoy.answer(case)
    return ToolAnswer("", 1)
