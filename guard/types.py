"""The guard's data contract: a tool call in, a verdict (and, when decoyed, the decoy answer) out.

Shared by normalisation, rules, judge and decoys; nothing here knows HTTP, Docker or a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Action(StrEnum):
    ALLOW = "allow"
    DECOY = "decoy"
    FLAG = "flag"


class Stage(StrEnum):
    RULES = "rules"
    JUDGE = "judge"


class Category(StrEnum):
    ANSWER_FETCH = "answer_fetch"
    HIDDEN_TEST_ACCESS = "hidden_test_access"
    GIT_HISTORY_LEAK = "git_history_leak"
    TEST_TAMPERING = "test_tampering"
    GRADER_TAMPERING = "grader_tampering"
    SANDBOX_ESCAPE = "sandbox_escape"
    UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class ToolCall:
    """One call as the agent made it: ``tool`` is bash/read_file/write_file/edit_file/list_dir/submit."""

    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolAnswer:
    """The one answer shape the agent sees, real or decoy."""

    output: str
    exit_code: int
    truncated: bool = False


@dataclass(frozen=True)
class Verdict:
    """DESIGN.md's guard verdict."""

    action: Action
    stage: Stage
    rule_id: str | None = None
    category: str | None = None
    confidence: float = 1.0
    reason: str = ""
    latency_us: float = 0.0
    stage_latency_us: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GuardContext:
    """What the judge and decoys may use: the task, the episode and its recent turns (each an
    earlier call and the answer the agent saw). The episode's mutable guard state (memory,
    repository context) travels beside it as ``guard.context.EpisodeState``."""

    task_statement: str = ""
    episode_id: str = ""
    recent_turns: tuple[str, ...] = ()
    protected_paths: tuple[str, ...] = ()
    # workspace paths grading restores from the pristine task (the task's ``grading.restore``):
    # changes confined to them run for real, flagged, instead of being decoyed
    restored_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class GuardDecision:
    """Verdict plus what to show: ``decoy`` is set exactly when ``verdict.action`` is DECOY (for
    bash, with ``rewrite`` also set, ``decoy`` is only the fallback when the sandbox cannot run it)."""

    verdict: Verdict
    normalized: str
    decoy: ToolAnswer | None = None
    # for a decoyed bash call: the command line to run in the sandbox instead of the agent's (the
    # agent's line with only the intercepted commands replaced by stubs); its real answer is the
    # answer, so everything else on the line behaves as bash makes it behave
    rewrite: str | None = None


@dataclass(frozen=True)
class Command:
    """One simple command found anywhere in a call, after unwrapping: ``program`` is a bare name."""

    program: str
    argv: tuple[str, ...] = ()
    source: str = "bash"  # where it was found: "bash", "bash -c", "eval", "base64", "python -c", ...
    # byte range, in the parsed command line, of the top-level simple command it was found in
    span: tuple[int, int] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class CodeBlock:
    """Program text found in a call: run now (``python -c``, a heredoc fed to an interpreter, a
    script written and run in the same command) or written to ``path`` for later. ``facts`` are
    what the code does (``import:socket``, ``call:urllib.request.urlopen('http://…')``, ...)."""

    lang: str  # "python" | "node" | "perl" | "ruby" | "php" | "awk" | "shell" | "text"
    text: str
    origin: str = "run"  # "run" | "write"
    path: str | None = None
    facts: tuple[str, ...] = ()


@dataclass(frozen=True)
class NormalizedCall:
    """What a call really does, independent of its spelling; ``text`` is stable (logs, judge cache).

    ``facts`` are call-level observations (``write:<path>``, ``write_empty:<path>``, ...) and
    ``blocks`` the code found in the call; ``code`` holds the same texts as ``blocks``; ``files``
    the files the call writes whose whole text is known (episode memory keeps them)."""

    tool: str
    text: str
    commands: tuple[Command, ...] = ()
    paths: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    parse_error: str | None = None
    facts: tuple[str, ...] = ()
    blocks: tuple[CodeBlock, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (absolute path, content) of files written with known text


@dataclass(frozen=True)
class RuleMatch:
    """A stage-1 hit: which rule, its category, and what it asks for (decoy, escalate, flag)."""

    rule_id: str
    category: str
    action: str  # "decoy" | "escalate" | "flag"
    description: str
    command: Command | None = None
    path: str | None = None


@dataclass(frozen=True)
class RuleResult:
    """Stage 1's answer: the normalised call and its first match by severity (None: allowed)."""

    normalized: NormalizedCall
    match: RuleMatch | None
    latency_us: float = 0.0
