"""Training samples from the trajectory store (read and marked through ``store`` methods).

A step reads whole episodes (every sub-trajectory, so GAE can chain them) that have ended, carry a
reward and have not been consumed; ``Store.commit_training_step`` marks them consumed in the same
transaction as the step's checkpoint row (the exactly-once argument is in ``store/training.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from store.codec import decode_action_mask, decode_logprobs, decode_token_ids
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow
from store.repository import Store
from trainer.batch import Sample

# Episodes cut off by a limit rather than ended by the agent: their return did not end there, so the
# critic bootstraps them. ``details["end_reason"]`` carries the rollout's reason when it sets one.
TRUNCATING_END_REASONS = frozenset({"max_turns", "max_tokens", "timeout", "context_full"})


@dataclass(frozen=True)
class StepData:
    samples: list[Sample]
    record_ids: list[int]
    episodes: int


def parse_policy_version(version: str | None) -> int:
    """The trainer's integer version of a stored policy version ("3", "step-3"; anything else is 0)."""
    if not version:
        return 0
    digits = version.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def is_truncated(episode: EpisodeRow) -> bool:
    if episode.status == EpisodeStatus.TIMED_OUT.value:
        return True
    details = episode.details or {}
    return bool(details.get("truncated")) or details.get("end_reason") in TRUNCATING_END_REASONS


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
) -> StepData:
    """Up to ``max_episodes`` oldest ended, rewarded, unconsumed episodes, every sub-trajectory of each
    (only among ``episode_ids`` when given: the asynchronous loop's queue names them).

    An episode is taken only when all its sub-trajectories are trainable and unconsumed (a gap would
    break the bootstrap chain); longer-than-allowed sub-trajectories exclude their episode too.
    """
    found = store.trainable_episodes(max_episodes, episode_ids)
    if not found:
        return StepData([], [], 0)
    task_numbers: dict[str, int] = {}
    samples: list[Sample] = []
    record_ids: list[int] = []
    used = 0
    for number, item in enumerate(found):
        rows, episode = item.sub_trajectories, item.episode
        if not _usable(rows, max_sequence_tokens):
            continue
        used += 1
        group = task_numbers.setdefault(episode.task_id, len(task_numbers))
        last_index = rows[-1].index
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
                    reward=float(episode.reward or 0.0),
                    group_id=group,
                    policy_version=version,
                    record_id=row.id,
                    token_versions=token_versions(row, version),
                    task_group=task_group(episode.task_id),
                )
            )
            record_ids.append(row.id)
    return StepData(samples, record_ids, used)


def _usable(rows: list[SubTrajectoryRow], max_sequence_tokens: int | None) -> bool:
    if not rows or [r.index for r in rows] != list(range(len(rows))):
        return False
    if any(not r.trainable or r.consumed_at is not None for r in rows):
        return False
    if not any(decode_action_mask(rows[-1].action_mask)):
        return False
    return max_sequence_tokens is None or all(r.num_tokens <= max_sequence_tokens for r in rows)


def shard_for_rank(samples: list[Sample], rank: int, world_size: int, by_group: bool) -> list[Sample]:
    """This rank's share: whole episodes (GAE chains them), or whole task groups (group baselines)."""
    if world_size == 1:
        return samples
    return [s for s in samples if (s.group_id if by_group else s.episode_id) % world_size == rank]
