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
    """What the judge and decoys may use: the task, the episode and its recent turns."""

    task_statement: str = ""
    episode_id: str = ""
    recent_turns: tuple[str, ...] = ()
    protected_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class GuardDecision:
    """Verdict plus what to show: ``decoy`` is set exactly when ``verdict.action`` is DECOY."""

    verdict: Verdict
    normalized: str
    decoy: ToolAnswer | None = None
