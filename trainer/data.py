"""Training data from the trajectory store, and the exactly-once bookkeeping of its consumption.

A step reads whole episodes (every sub-trajectory, so GAE can chain them) that have ended, carry a
reward and have not been consumed. After the step's checkpoint is on disk, :func:`commit_step`
inserts the ``training_steps`` row *and* marks those sub-trajectories consumed in one transaction.
Resuming always starts from the newest committed row, so:

* a crash before the commit leaves the data unconsumed and the previous checkpoint current: the
  resumed trainer trains on that data once, from the state that has not seen it;
* a crash after the commit resumes from the new checkpoint and never sees the data again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update

from rlguard.store.codec import decode_action_mask, decode_logprobs, decode_token_ids
from rlguard.store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow, TrainingStepRow, utcnow
from rlguard.store.repository import Store
from trainer.batch import Sample

# Episodes cut off by a limit rather than ended by the agent: their return did not end there, so the
# critic bootstraps them. ``details["end_reason"]`` carries the rollout's reason when it sets one.
TRUNCATING_END_REASONS = frozenset({"max_turns", "max_tokens", "timeout", "context_full"})
TRAINABLE_STATUSES = (EpisodeStatus.FINISHED.value, EpisodeStatus.TIMED_OUT.value)


class ConsumptionConflict(RuntimeError):
    """Some of the step's sub-trajectories were consumed by someone else meanwhile: nothing committed."""


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


def load_step_data(store: Store, max_episodes: int, max_sequence_tokens: int | None = None) -> StepData:
    """Up to ``max_episodes`` oldest ended, rewarded, unconsumed episodes, every sub-trajectory of each.

    An episode is taken only when all its sub-trajectories are trainable and unconsumed (a gap would
    break the bootstrap chain); longer-than-allowed sub-trajectories exclude their episode too.
    """
    with store.sessions() as session:
        untrainable = select(SubTrajectoryRow.episode_id).where(SubTrajectoryRow.trainable.is_(False))
        candidates = (
            select(SubTrajectoryRow.episode_id)
            .join(EpisodeRow)
            .where(
                SubTrajectoryRow.consumed_at.is_(None),
                EpisodeRow.status.in_(TRAINABLE_STATUSES),
                EpisodeRow.reward.is_not(None),
                SubTrajectoryRow.episode_id.not_in(untrainable),
            )
            .group_by(SubTrajectoryRow.episode_id)
            .order_by(func.min(SubTrajectoryRow.id))
            .limit(max_episodes)
        )
        episode_ids = list(session.scalars(candidates))
        if not episode_ids:
            return StepData([], [], 0)
        episodes = {
            e.id: e for e in session.scalars(select(EpisodeRow).where(EpisodeRow.id.in_(episode_ids)))
        }
        rows_by_episode: dict[str, list[SubTrajectoryRow]] = defaultdict(list)
        for row in session.scalars(
            select(SubTrajectoryRow)
            .where(SubTrajectoryRow.episode_id.in_(episode_ids))
            .order_by(SubTrajectoryRow.episode_id, SubTrajectoryRow.index)
        ):
            rows_by_episode[row.episode_id].append(row)

    task_numbers: dict[str, int] = {}
    samples: list[Sample] = []
    record_ids: list[int] = []
    used = 0
    for number, episode_id in enumerate(episode_ids):
        rows = rows_by_episode[episode_id]
        episode = episodes[episode_id]
        if not _usable(rows, max_sequence_tokens):
            continue
        used += 1
        group = task_numbers.setdefault(episode.task_id, len(task_numbers))
        last_index = rows[-1].index
        for row in rows:
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
                    policy_version=parse_policy_version(row.policy_version or episode.policy_version),
                    record_id=row.id,
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


def commit_step(
    store: Store,
    run: str,
    step: int,
    policy_version: str,
    checkpoint_path: str,
    record_ids: list[int],
    metrics: dict[str, Any] | None = None,
) -> int:
    """Record the step's checkpoint and mark its data consumed, atomically; returns the step row id.

    Raises :class:`ConsumptionConflict` (and commits nothing) when any of ``record_ids`` is already
    consumed, so two trainers can never both claim the same data.
    """
    with store.sessions.begin() as session:
        row = TrainingStepRow(
            run=run,
            step=step,
            policy_version=policy_version,
            checkpoint_path=checkpoint_path,
            num_sub_trajectories=len(record_ids),
            metrics={k: v for k, v in (metrics or {}).items() if v == v},  # JSON has no NaN
        )
        session.add(row)
        session.flush()
        if record_ids:
            result = session.execute(
                update(SubTrajectoryRow)
                .where(SubTrajectoryRow.id.in_(record_ids), SubTrajectoryRow.consumed_at.is_(None))
                .values(consumed_at=utcnow(), consumed_by_step=row.id)
            )
            if result.rowcount != len(record_ids):
                raise ConsumptionConflict(
                    f"{len(record_ids) - result.rowcount} of the step's sub-trajectories were consumed "
                    "meanwhile"
                )
        return row.id


def shard_for_rank(samples: list[Sample], rank: int, world_size: int, by_group: bool) -> list[Sample]:
    """This rank's share: whole episodes (GAE chains them), or whole task groups (group baselines)."""
    if world_size == 1:
        return samples
    return [s for s in samples if (s.group_id if by_group else s.episode_id) % world_size == rank]


def latest_step(store: Store, run: str) -> TrainingStepRow | None:
    """The newest committed step of ``run`` (the one to resume from), or None."""
    with store.sessions() as session:
        return session.scalars(
            select(TrainingStepRow)
            .where(TrainingStepRow.run == run)
            .order_by(TrainingStepRow.step.desc())
            .limit(1)
        ).first()
