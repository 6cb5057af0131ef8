"""Context compaction: when the next turn would pass the token budget, summarise and start over.

The policy itself writes the summary (its tokens are trained on in the sub-trajectory that asked
for it), then a new sub-trajectory starts from system + task + the summary + the most recent turns
verbatim. Carried-over tokens are context in the new sub-trajectory (mask 0): each generated token
is trained on exactly once, in the sub-trajectory where the policy produced it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout.chat_format import ChatFormat
from rollout.trajectory import SubTrajectory

COMPACTION_REQUEST = (
    "Your context is almost full. Write a summary of your progress for yourself: what the task is, "
    "what you found, what you changed, what is left to do. Do not call a tool; reply with the summary."
)
SUMMARY_HEADER = "Summary of your earlier work on this task (your context was compacted):\n"


@dataclass(frozen=True)
class Turn:
    """One finished turn's tokens as they sit in the context: generation prompt to tool answers."""

    token_ids: list[int]


def needs_compaction(context_len: int, turn_reserve: int, budget: int) -> bool:
    """True when the next turn (its prompt header and max new tokens) could pass ``budget``."""
    return context_len + turn_reserve > budget


def request_ids(fmt: ChatFormat) -> list[int]:
    """The user turn asking for a summary, then the generation prompt."""
    return fmt.user_turn_ids(COMPACTION_REQUEST) + fmt.generation_prompt_ids


def is_compaction_request(fmt: ChatFormat, prompt_ids: list[int]) -> bool:
    """Whether ``prompt_ids`` ends with the summary request (the scripted policy checks this)."""
    tail = request_ids(fmt)
    return prompt_ids[-len(tail) :] == tail


def compacted(
    fmt: ChatFormat,
    prefix_ids: list[int],
    summary: str,
    recent: list[Turn],
    index: int,
    policy_version: str,
    trainable: bool,
    budget: int,
    turn_reserve: int,
) -> SubTrajectory | None:
    """The next sub-trajectory: prefix + summary + as many recent turns as fit; None if nothing fits."""
    base = prefix_ids + fmt.user_turn_ids(SUMMARY_HEADER + summary.strip())
    kept = list(recent)
    while kept and needs_compaction(len(base) + sum(len(t.token_ids) for t in kept), turn_reserve, budget):
        kept.pop(0)
    if needs_compaction(len(base), turn_reserve, budget):
        return None
    new = SubTrajectory(index=index, policy_version=policy_version, trainable=trainable)
    new.add_context(base)
    for turn in kept:
        new.add_context(turn.token_ids)
    return new
