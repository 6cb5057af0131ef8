"""What the trainer reads from the store and how it marks what it consumed (``Store`` methods).

A step reads whole episodes (every sub-trajectory, so GAE can chain them) that have ended, carry a
reward and have not been consumed. After the step's checkpoint is on disk,
:meth:`TrainingQueries.commit_training_step` inserts the ``training_steps`` row *and* marks those
sub-trajectories consumed in one transaction. Resuming always starts from the newest committed row,
so a crash before the commit leaves the data unconsumed, and a crash after it never shows it again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, update

from store.errors import StoreError
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow, ToolCallRow, TrainingStepRow, utcnow

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

TRAINABLE_STATUSES = (EpisodeStatus.FINISHED.value, EpisodeStatus.TIMED_OUT.value)


class ConsumptionConflict(StoreError):
    """Some of the step's sub-trajectories were consumed by someone else meanwhile: nothing committed."""


@dataclass(frozen=True)
class TrainableEpisode:
    """An ended, rewarded episode with every one of its sub-trajectories, in index order (detached),
    and how many of its tool calls the agent was answered with a decoy (what an intercept penalty
    charges: flagged calls ran for real, and honest agents write tests too)."""

    episode: EpisodeRow
    sub_trajectories: list[SubTrajectoryRow]
    decoyed_calls: int = 0


class TrainingQueries:
    """The trainer's queries, mixed into ``Store`` (which provides ``sessions``)."""

    sessions: sessionmaker[Session]

    def trainable_episodes(
        self,
        max_episodes: int,
        only: list[str] | None = None,
        run: str | None = None,
        policy_versions: list[str] | None = None,
    ) -> list[TrainableEpisode]:
        """Up to ``max_episodes`` oldest ended, rewarded episodes none of whose sub-trajectories is
        untrainable and that are not marked unusable, with every sub-trajectory (the caller checks
        the chain). Filters, each only when given: ``only`` (episode ids: the asynchronous loop's
        queue), ``run`` (the run that played them: a trainer takes its own round, not the oldest
        episodes of a shared store) and ``policy_versions`` (the versions that played them)."""
        filters = [
            SubTrajectoryRow.consumed_at.is_(None),
            EpisodeRow.status.in_(TRAINABLE_STATUSES),
            EpisodeRow.reward.is_not(None),
            EpisodeRow.unusable_reason.is_(None),
        ]
        if only is not None:
            filters.append(SubTrajectoryRow.episode_id.in_(only))
        if run is not None:
            filters.append(EpisodeRow.run == run)
        if policy_versions is not None:
            filters.append(EpisodeRow.policy_version.in_(policy_versions))
        with self.sessions() as session:
            untrainable = select(SubTrajectoryRow.episode_id).where(SubTrajectoryRow.trainable.is_(False))
            candidates = (
                select(SubTrajectoryRow.episode_id)
                .join(EpisodeRow)
                .where(*filters, SubTrajectoryRow.episode_id.not_in(untrainable))
                .group_by(SubTrajectoryRow.episode_id)
                .order_by(func.min(SubTrajectoryRow.id))
                .limit(max_episodes)
            )
            episode_ids = list(session.scalars(candidates))
            if not episode_ids:
                return []
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
            decoyed = dict(
                session.execute(
                    select(ToolCallRow.episode_id, func.count(ToolCallRow.id))
                    .where(ToolCallRow.episode_id.in_(episode_ids), ToolCallRow.was_decoy.is_(True))
                    .group_by(ToolCallRow.episode_id)
                ).all()
            )
        return [
            TrainableEpisode(episodes[i], rows_by_episode[i], int(decoyed.get(i, 0))) for i in episode_ids
        ]

    def mark_unusable(self, reasons: dict[str, str]) -> int:
        """Mark episodes the trainer will never train on, with why (``{episode_id: reason}``); an
        episode already marked keeps its first reason. They no longer come back from
        :meth:`trainable_episodes`, so they cannot crowd out usable data step after step."""
        marked = 0
        if not reasons:
            return 0
        with self.sessions.begin() as session:
            for episode_id, reason in reasons.items():
                result = session.execute(
                    update(EpisodeRow)
                    .where(EpisodeRow.id == episode_id, EpisodeRow.unusable_reason.is_(None))
                    .values(unusable_reason=reason[:200])
                )
                marked += result.rowcount
        return marked

    def commit_training_step(
        self,
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
        with self.sessions.begin() as session:
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

    def drop_sub_trajectories(self, record_ids: list[int]) -> int:
        """Mark sub-trajectories consumed without a training step (too stale to train on): they never
        come back, and ``consumed_by_step`` stays empty to tell them from trained ones."""
        if not record_ids:
            return 0
        with self.sessions.begin() as session:
            result = session.execute(
                update(SubTrajectoryRow)
                .where(SubTrajectoryRow.id.in_(record_ids), SubTrajectoryRow.consumed_at.is_(None))
                .values(consumed_at=utcnow())
            )
            return result.rowcount

    def latest_training_step(self, run: str) -> TrainingStepRow | None:
        """The newest committed step of ``run`` (the one to resume from), or None."""
        with self.sessions() as session:
            return session.scalars(
                select(TrainingStepRow)
                .where(TrainingStepRow.run == run)
                .order_by(TrainingStepRow.step.desc())
                .limit(1)
            ).first()
