"""Episode context for stage 1: a call read together with what the episode and the repository know.

``enrich`` adds to a normalised call what one call cannot show: the files it runs that earlier
calls wrote (``EpisodeMemory.expand``) and the git objects it names that lie beyond the task's
base (``guard.repo.git_facts``). Lost or broken state never fails the call: an error while reading
the memory becomes the fact ``memory_error:<reason>``, which the rules escalate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from guard.memory import EpisodeMemory
from guard.repo import RepoContext, git_facts
from guard.types import NormalizedCall

log = logging.getLogger("rlguard.guard.context")


@dataclass
class EpisodeState:
    """The guard's state for one episode, held by the gateway beside the live episode: the memory
    of what earlier calls wrote and the repository context read at episode start (None: unknown)."""

    memory: EpisodeMemory = field(default_factory=EpisodeMemory)
    repo: RepoContext | None = None


def enrich(
    normalized: NormalizedCall, memory: EpisodeMemory | None = None, repo: RepoContext | None = None
) -> NormalizedCall:
    """``normalized`` with episode-memory and repository facts added (itself when none apply)."""
    if normalized.parse_error is not None:
        return normalized
    if memory is not None:
        try:
            normalized = memory.expand(normalized)
        except Exception as exc:  # a memory bug must cost a judge call, never the tool call
            log.exception("episode memory failed; the call is escalated")
            normalized = replace(normalized, facts=(*normalized.facts, f"memory_error:{type(exc).__name__}"))
    if any(c.program == "git" for c in normalized.commands):
        extra = git_facts(normalized.commands, repo)
        if extra:
            normalized = replace(normalized, facts=tuple(dict.fromkeys((*normalized.facts, *extra))))
    return normalized
