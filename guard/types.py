"""The guard's data contract: a tool call in, a verdict (and, when decoyed, the decoy answer) out.

Shared by normalisation, rules, judge and decoys; nothing here knows HTTP, Docker or a database.
The call and the answer themselves are the project-wide contract's (:mod:`contract.calls`); they
are named here too because every guard module reads them beside the guard's own types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from contract.calls import ToolAnswer, ToolCall

__all__ = [
    "CHANGE_OPS",
    "READ_OPS",
    "Action",
    "Category",
    "CodeBlock",
    "Command",
    "Effect",
    "GuardContext",
    "GuardDecision",
    "Integrity",
    "NormalizedCall",
    "RuleMatch",
    "RuleResult",
    "Stage",
    "ToolAnswer",
    "ToolCall",
    "Verdict",
]


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
class Integrity:
    """A task's integrity surface: globs of what the agent may never read (``hidden``), never
    change (``protected``: write, move, delete, chmod, truncate, link over, replace its directory)
    and may change only to have grading undo it (``restored``: such changes run, flagged).

    Globs are matched on absolute paths: a relative glob is anchored at ``/workspace``, a leading
    ``**/`` matches at any depth, ``**`` spans directories, and a glob naming a directory covers
    everything below it (``evals`` and ``evals/**`` mean the same)."""

    hidden: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.hidden or self.protected or self.restored)

    @classmethod
    def from_mapping(cls, value: object) -> Integrity:
        """An ``integrity`` object (``{"hidden", "protected", "restored"}``, each a list of glob
        strings, any of them missing) as an ``Integrity``; ``ValueError`` says what is wrong."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise ValueError("must be an object with 'hidden', 'protected' and 'restored' lists")
        unknown = sorted(set(value) - {"hidden", "protected", "restored"})
        if unknown:
            raise ValueError(f"has unknown keys {unknown}; known: hidden, protected, restored")
        sets: dict[str, tuple[str, ...]] = {}
        for key in ("hidden", "protected", "restored"):
            globs = value.get(key) or []
            if not isinstance(globs, list) or not all(isinstance(g, str) and g.strip() for g in globs):
                raise ValueError(f"'{key}' must be a list of non-empty glob strings")
            sets[key] = tuple(g.strip() for g in globs)
        return cls(**sets)

    def merged(self, other: Integrity) -> Integrity:
        """Both surfaces together (each list in order, without repeats)."""
        return Integrity(
            tuple(dict.fromkeys((*self.hidden, *other.hidden))),
            tuple(dict.fromkeys((*self.protected, *other.protected))),
            tuple(dict.fromkeys((*self.restored, *other.restored))),
        )


@dataclass(frozen=True)
class GuardContext:
    """What the judge and decoys may use: the task, the episode and its recent turns (each an
    earlier call and the answer the agent saw). The episode's mutable guard state (memory,
    repository context) travels beside it as ``guard.context.EpisodeState``."""

    task_statement: str = ""
    episode_id: str = ""
    recent_turns: tuple[str, ...] = ()
    # the task's own hidden paths (the older name of ``integrity.hidden``, absolute prefixes)
    protected_paths: tuple[str, ...] = ()
    # workspace paths grading restores from the pristine task (the task's ``grading.restore``):
    # changes confined to them run for real, flagged, instead of being decoyed
    restored_paths: tuple[str, ...] = ()
    # the task's integrity surface (``Integrity``); the two fields above are folded into it
    integrity: Integrity = field(default_factory=Integrity)

    @property
    def surface(self) -> Integrity:
        """The integrity surface with ``protected_paths`` as hidden and ``restored_paths`` as restored."""
        legacy = Integrity(hidden=self.protected_paths, restored=self.restored_paths)
        return legacy.merged(self.integrity) if legacy else self.integrity


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


class Effect(NamedTuple):
    """One thing a call does to a path, whatever the spelling: a read (``read``, ``list``,
    ``exec``) or a change (``write``, ``append``, ``delete``, ``move``, ``mode``, ``link``).

    ``path`` is absolute (it may hold glob characters the shell or a program would expand);
    ``recursive`` says the effect covers everything below ``path`` (``rm -r``, ``cp -r``,
    ``grep -r``, ``chmod -R``); ``source`` is where a written or linked path's content comes
    from (``cp SRC DST``, ``ln -s TARGET LINK``, ``mv SRC DST``); ``deferred`` marks what code the
    call writes would do when run later (the run itself is judged then, through episode memory).
    A named tuple, not a dataclass: a call makes several, and tuples are built and hashed in C."""

    op: str
    path: str
    recursive: bool = False
    source: str | None = None
    deferred: bool = False


READ_OPS = frozenset({"read", "list", "exec"})
CHANGE_OPS = frozenset({"write", "append", "delete", "move", "mode", "link"})


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
    effects: tuple[Effect, ...] = ()  # what the call reads and changes, path by path


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
