"""Episode context for stage 1: a call read together with what the episode and the repository know.

``enrich`` adds to a normalised call what one call cannot show: the files it runs that earlier calls
wrote (``EpisodeMemory.expand``), the git objects it names that lie beyond the task's base
(``guard.repo.git_facts``) and, on every call, whether the sandbox's repository is neutral
(``guard.repo.neutral_facts``: it holds nothing beyond the base, so reading ``.git`` is harmless).
Lost or broken state never fails the call: an error while reading the memory becomes the fact
``memory_error:<reason>``, which the rules escalate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from guard.memory import EpisodeMemory
from guard.repo import RepoContext, git_facts, neutral_facts
from guard.types import CodeBlock, NormalizedCall, ToolCall

MAX_CONFIG_CHARS = 64 * 1024

log = logging.getLogger("rlguard.guard.context")


@dataclass
class EpisodeState:
    """The guard's state for one episode, held by the gateway beside the live episode: the memory
    of what earlier calls wrote and the repository context read at episode start (None: unknown)."""

    memory: EpisodeMemory = field(default_factory=EpisodeMemory)
    repo: RepoContext | None = None


# files whose text decides which tests run but that normalisation does not read as code
_RUNNER_CONFIGS = (
    "package.json",
    "Cargo.toml",
    "go.mod",
    "jest.config.js",
    "jest.config.ts",
    "vitest.config.ts",
)


def _runner_config(call: ToolCall, normalized: NormalizedCall) -> NormalizedCall:
    """A written or edited test-runner configuration (``package.json`` scripts, ...) as a code block
    of language ``config``, so rules can read what the new text makes the test command do."""
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    path = next((f.split(":", 1)[1] for f in normalized.facts if f.startswith("write:")), "")
    if not path.endswith(_RUNNER_CONFIGS) or any(b.path == path for b in normalized.blocks):
        return normalized
    text = arguments.get("content") if call.tool == "write_file" else arguments.get("new_str")
    if not isinstance(text, str) or not text.strip():
        return normalized
    block = CodeBlock("config", text[:MAX_CONFIG_CHARS], "write", path, ())
    return replace(normalized, blocks=(*normalized.blocks, block))


def enrich(
    normalized: NormalizedCall,
    memory: EpisodeMemory | None = None,
    repo: RepoContext | None = None,
    call: ToolCall | None = None,
) -> NormalizedCall:
    """``normalized`` with episode-memory and repository facts added (itself when none apply)."""
    if normalized.parse_error is not None:
        return normalized
    if call is not None and call.tool in ("write_file", "edit_file"):
        normalized = _runner_config(call, normalized)
    if memory is not None:
        try:
            normalized = memory.expand(normalized)
        except Exception as exc:  # a memory bug must cost a judge call, never the tool call
            log.exception("episode memory failed; the call is escalated")
            normalized = replace(normalized, facts=(*normalized.facts, f"memory_error:{type(exc).__name__}"))
    extra = neutral_facts(repo)  # every call: reading .git is harmless once nothing lies beyond
    if any(c.program == "git" for c in normalized.commands):
        extra += git_facts(normalized.commands, repo)
    if extra:
        normalized = replace(normalized, facts=tuple(dict.fromkeys((*normalized.facts, *extra))))
    return normalized
