"""Training samples from the trajectory store (read and marked through ``store`` methods).

A step reads whole episodes (every sub-trajectory, so GAE can chain them) that have ended, carry a
reward and have not been consumed; ``Store.commit_training_step`` marks them consumed in the same
transaction as the step's checkpoint row (the exactly-once argument is in ``store/training.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from store.codec import decode_action_mask, decode_logprobs, decode_token_ids
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow
from store.repository import Store
from trainer.batch import Sample

# How an episode ended, in the rollout's words (``details["end_reason"]``, sent with ``finish``):
# a limit (terminal for the outcome reward by default; ``bootstrap_truncated`` bootstraps them), the
# agent itself ("submitted"), or an infrastructure error (policy server, gateway, upload): the
# episode then says nothing about the policy and is never trained on.
LIMIT_END_REASONS = frozenset({"max_turns", "max_tokens", "timeout", "context_full"})
INFRASTRUCTURE_END_REASONS = frozenset({"error"})


@dataclass(frozen=True)
class StepData:
    """A step's samples, their rows' ids, how many episodes they hold, and the episodes read but
    found unusable (``{episode_id: reason}``, marked in the store so they are not read again)."""

    samples: list[Sample]
    record_ids: list[int]
    episodes: int
    unusable: dict[str, str] = field(default_factory=dict)
    episode_names: dict[int, str] = field(default_factory=dict)  # Sample.episode_id -> the store's id
    decoyed_calls: int = 0  # calls answered with a decoy, over the usable episodes


def parse_policy_version(version: str | None) -> int:
    """The trainer's integer version of a stored policy version ("3", "step-3"; anything else is 0)."""
    if not version:
        return 0
    digits = version.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def end_reason(episode: EpisodeRow) -> str | None:
    """How the episode ended: the rollout's ``details["end_reason"]``; ``timeout`` for an episode the
    gateway timed out (idle or over its wall-clock limit) without one; None when unknown."""
    reason = (episode.details or {}).get("end_reason")
    if reason:
        return str(reason)
    return "timeout" if episode.status == EpisodeStatus.TIMED_OUT.value else None


def is_truncated(episode: EpisodeRow) -> bool:
    """Ended by a limit rather than by the agent (or ``details["truncated"]``, for other writers)."""
    return end_reason(episode) in LIMIT_END_REASONS or bool((episode.details or {}).get("truncated"))


def token_versions(row: SubTrajectoryRow, default: int) -> list[int] | None:
    """Per-token versions from the row's ``version_spans`` (None when it has none: one version)."""
    if not row.version_spans:
        return None
    versions = [default] * row.num_tokens
    for start, end, version in row.version_spans:
        versions[int(start) : int(end)] = [parse_policy_version(str(version))] * (int(end) - int(start))
    return versions


def task_group(task_id: str) -> str:
    """A task's group: its suite (the part of ``<suite>/<task>`` before the slash)."""
    return task_id.split("/", 1)[0]


def load_step_data(
    store: Store,
    max_episodes: int,
    max_sequence_tokens: int | None = None,
    episode_ids: list[str] | None = None,
    run: str | None = None,
    policy_versions: list[str] | None = None,
    mark_unusable: bool = True,
    intercept_penalty: float = 0.0,
) -> StepData:
    """Up to ``max_episodes`` oldest ended, rewarded, unconsumed episodes, every sub-trajectory of each
    (only among ``episode_ids`` when given: the asynchronous loop's queue names them; only of ``run``
    and ``policy_versions`` when given: a loop trains its own round).

    An episode is taken only when all its sub-trajectories are trainable and unconsumed (a gap would
    break the advantage chain), none is longer than ``max_sequence_tokens``, and it did not end in an
    infrastructure error; the others are returned in ``unusable`` with the reason and, with
    ``mark_unusable``, marked so in the store (they would otherwise come back at every step, oldest
    first, and could stall a trainer that reads a few episodes at a time).

    The reward trained on is the graded reward less ``intercept_penalty`` per call the agent was
    answered with a decoy (not floored: a floor would make every cheat past it free); the store
    keeps the grade as it was.
    """
    found = store.trainable_episodes(max_episodes, episode_ids, run, policy_versions)
    if not found:
        return StepData([], [], 0)
    task_numbers: dict[str, int] = {}
    samples: list[Sample] = []
    record_ids: list[int] = []
    unusable: dict[str, str] = {}
    names: dict[int, str] = {}
    used = 0
    decoyed_calls = 0
    for number, item in enumerate(found):
        rows, episode = item.sub_trajectories, item.episode
        problem = unusable_reason(episode, rows, max_sequence_tokens)
        if problem is not None:
            unusable[episode.id] = problem
            continue
        used += 1
        decoyed_calls += item.decoyed_calls
        names[number] = episode.id
        reward = float(episode.reward or 0.0) - intercept_penalty * item.decoyed_calls
        group = task_numbers.setdefault(episode.task_id, len(task_numbers))
        last_index = rows[-1].index
        reason = end_reason(episode)
        for row in rows:
            version = parse_policy_version(row.policy_version or episode.policy_version)
            samples.append(
                Sample(
                    input_ids=decode_token_ids(row.token_ids).tolist(),
                    action_mask=decode_action_mask(row.action_mask).tolist(),
                    logprobs=decode_logprobs(row.logprobs).tolist(),
                    episode_id=number,
                    sub_index=row.index,
                    is_last=row.index == last_index,
                    truncated=is_truncated(episode),
                    reward=reward,
                    group_id=group,
                    policy_version=version,
                    record_id=row.id,
                    token_versions=token_versions(row, version),
                    task_group=task_group(episode.task_id),
                    end_reason=reason,
                )
            )
            record_ids.append(row.id)
    if unusable and mark_unusable:
        store.mark_unusable(unusable)
    return StepData(samples, record_ids, used, unusable, names, decoyed_calls)


def unusable_reason(
    episode: EpisodeRow, rows: list[SubTrajectoryRow], max_sequence_tokens: int | None
) -> str | None:
    """Why the trainer can never train on this episode, or None when it can."""
    if end_reason(episode) in INFRASTRUCTURE_END_REASONS:
        return (
            "infrastructure error: " + str((episode.details or {}).get("error") or "the rollout failed")[:150]
        )
    if not rows or [r.index for r in rows] != list(range(len(rows))):
        return "sub-trajectories missing: the advantage chain would break"
    if any(not r.trainable for r in rows):
        return "a sub-trajectory is not trainable (no token ids from the policy)"
    if any(r.consumed_at is not None for r in rows):
        return "partly consumed: some sub-trajectories were already trained or dropped"
    if not any(decode_action_mask(rows[-1].action_mask)):
        return "the last sub-trajectory has no action token to carry the reward"
    if max_sequence_tokens is not None and any(r.num_tokens > max_sequence_tokens for r in rows):
        return f"a sub-trajectory is longer than max_sequence_tokens ({max_sequence_tokens})"
    return None


def split_small_groups(
    samples: list[Sample], min_group_size: int, names: dict[int, str] | None = None
) -> tuple[list[Sample], list[str]]:
    """``(samples of groups with at least min_group_size episodes, store ids of the others' episodes)``.

    A group baseline cannot use a group left with one episode (the loops schedule whole groups; one
    shrinks when members end in an infrastructure error): it is left out of the step and reported,
    rather than failing the step (``trainer.advantages`` refuses such groups outright)."""
    episodes: dict[int, set[int]] = {}
    for x in samples:
        episodes.setdefault(x.group_id, set()).add(x.episode_id)
    small = {g for g, members in episodes.items() if len(members) < min_group_size}
    kept = [x for x in samples if x.group_id not in small]
    left = sorted({x.episode_id for x in samples if x.group_id in small})
    return kept, [(names or {}).get(e, str(e)) for e in left]


def shard_for_rank(samples: list[Sample], rank: int, world_size: int, by_group: bool) -> list[Sample]:
    """This rank's share: whole episodes (GAE chains them), or whole task groups (group baselines)."""
    if world_size == 1:
        return samples
    return [s for s in samples if (s.group_id if by_group else s.episode_id) % world_size == rank]
