"""Data access for the gateway, the audit, the export and the trainer: short transactions, typed rows.

All methods are synchronous (SQLAlchemy's sync API works the same on SQLite and PostgreSQL); the
gateway runs them in its database executor so the event loop never blocks on disk.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, case, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload, sessionmaker

from store.codec import decode_action_mask, decode_logprobs, decode_token_ids
from store.engine import make_engine, make_session_factory
from store.errors import StoreError
from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow, TaskRow, ToolCallRow, utcnow
from store.training import TrainingQueries

_CALL_COLUMNS = tuple(c.key for c in ToolCallRow.__table__.columns if c.key != "id")


class DuplicateError(StoreError):
    """The row already exists (e.g. a sub-trajectory index uploaded twice)."""


@dataclass(frozen=True)
class InterceptFilter:
    """Filters of the audit views; ``None`` means no filter."""

    category: str | None = None
    stage: str | None = None
    episode_id: str | None = None
    policy_version: str | None = None
    since: datetime | None = None


@dataclass(frozen=True)
class Intercept:
    """One intercepted (decoyed or flagged) call with the episode facts the audit shows beside it."""

    call: ToolCallRow
    task_id: str
    policy_version: str | None


@dataclass(frozen=True)
class RateRow:
    key: str | None
    calls: int
    intercepted: int

    @property
    def rate(self) -> float:
        return self.intercepted / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class InterceptStats:
    """Intercept counts and rates: per category (over all calls) and per policy version."""

    total_calls: int
    intercepted: int
    by_category: list[RateRow] = field(default_factory=list)
    by_policy_version: list[RateRow] = field(default_factory=list)


class Store(TrainingQueries):
    """The trajectory store over one engine; thread-safe (one short session per method)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions: sessionmaker[Session] = make_session_factory(engine)

    @classmethod
    def from_url(cls, url: str) -> Store:
        return cls(make_engine(url))

    def close(self) -> None:
        self.engine.dispose()

    # -- tasks and episodes -------------------------------------------------------------------

    def upsert_task(
        self, task_id: str, suite: str, instructions: str, image: str, details: dict[str, Any]
    ) -> None:
        """Record the snapshot of a task an episode runs (refreshed when the task changed)."""
        values = {"instructions": instructions, "image": image, "details": details}
        try:
            with self.sessions.begin() as session:
                row = session.get(TaskRow, task_id)
                if row is None:
                    session.add(TaskRow(id=task_id, suite=suite, **values))
                else:
                    session.execute(update(TaskRow).where(TaskRow.id == task_id).values(**values))
        except IntegrityError:  # a concurrent first episode of this task inserted it: refresh it
            with self.sessions.begin() as session:
                session.execute(update(TaskRow).where(TaskRow.id == task_id).values(**values))

    def create_episode(self, row: EpisodeRow) -> None:
        with self.sessions.begin() as session:
            session.add(row)

    def record_call(self, row: ToolCallRow) -> None:
        """Insert one call and touch its episode in one transaction: both land or neither does."""
        self.record_calls([row])

    def record_calls(self, rows: Sequence[ToolCallRow]) -> None:
        """Insert calls (of any episodes) and touch their episodes, all in one transaction.

        Core statements on a plain connection: this runs for every tool call, and the ORM's unit
        of work costs ~2.5x the CPU here for no benefit.
        """
        episodes = EpisodeRow.__table__
        touched: dict[str, tuple[int, datetime]] = {}
        for row in rows:
            count, last = touched.get(row.episode_id, (0, row.created_at))
            touched[row.episode_id] = (count + 1, max(last, row.created_at))
        with self.engine.begin() as connection:
            connection.execute(
                ToolCallRow.__table__.insert(),
                [{column: getattr(row, column) for column in _CALL_COLUMNS} for row in rows],
            )
            for episode_id, (count, last) in touched.items():
                connection.execute(
                    episodes.update()
                    .where(episodes.c.id == episode_id)
                    .values(num_calls=episodes.c.num_calls + count, last_activity_at=last)
                )

    def end_episode(
        self,
        episode_id: str,
        status: EpisodeStatus,
        *,
        reward: float | None = None,
        details: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> bool:
        """Move a running episode to a final status; False when it was no longer running."""
        values: dict[str, Any] = {"status": status.value, "reward": reward, "finished_at": at or utcnow()}
        if details is not None:
            values["details"] = details
        with self.sessions.begin() as session:
            result = session.execute(
                update(EpisodeRow)
                .where(EpisodeRow.id == episode_id, EpisodeRow.status == EpisodeStatus.RUNNING.value)
                .values(**values)
            )
            return result.rowcount == 1

    def interrupt_running(self) -> list[tuple[str, str | None]]:
        """Mark every ``running`` episode ``interrupted`` (their gateway died); return (id, sandbox id)."""
        with self.sessions.begin() as session:
            rows = session.execute(
                select(EpisodeRow.id, EpisodeRow.sandbox_id).where(
                    EpisodeRow.status == EpisodeStatus.RUNNING.value
                )
            ).all()
            if rows:
                session.execute(
                    update(EpisodeRow)
                    .where(EpisodeRow.id.in_([r.id for r in rows]))
                    .values(status=EpisodeStatus.INTERRUPTED.value, finished_at=utcnow())
                )
            return [(r.id, r.sandbox_id) for r in rows]

    def episode(self, episode_id: str, *, with_children: bool = False) -> EpisodeRow | None:
        with self.sessions() as session:
            stmt = select(EpisodeRow).where(EpisodeRow.id == episode_id)
            if with_children:
                stmt = stmt.options(
                    selectinload(EpisodeRow.tool_calls), selectinload(EpisodeRow.sub_trajectories)
                )
            return session.scalars(stmt).one_or_none()

    def episode_id_for_token_hash(self, token_hash: str) -> str | None:
        with self.sessions() as session:
            return session.scalar(select(EpisodeRow.id).where(EpisodeRow.agent_token_hash == token_hash))

    # -- sub-trajectories (written by the rollout runner, read by the trainer) ------------------

    def add_sub_trajectory(self, row: SubTrajectoryRow) -> None:
        try:
            with self.sessions.begin() as session:
                session.add(row)
        except IntegrityError as exc:
            raise DuplicateError(f"sub-trajectory {row.index} of episode {row.episode_id} exists") from exc

    # -- audit ------------------------------------------------------------------------------------

    def intercepts(self, filters: InterceptFilter, *, limit: int, offset: int = 0) -> list[Intercept]:
        """Intercepted calls (action decoy or flag), newest first."""
        stmt = (
            select(ToolCallRow, EpisodeRow.task_id, EpisodeRow.policy_version)
            .join(EpisodeRow, ToolCallRow.episode_id == EpisodeRow.id)
            .where(ToolCallRow.action != "allow")
            .order_by(ToolCallRow.id.desc())
            .limit(limit)
            .offset(offset)
        )
        if filters.category is not None:
            stmt = stmt.where(ToolCallRow.category == filters.category)
        if filters.stage is not None:
            stmt = stmt.where(ToolCallRow.stage == filters.stage)
        if filters.episode_id is not None:
            stmt = stmt.where(ToolCallRow.episode_id == filters.episode_id)
        if filters.policy_version is not None:
            stmt = stmt.where(EpisodeRow.policy_version == filters.policy_version)
        if filters.since is not None:
            stmt = stmt.where(ToolCallRow.created_at >= filters.since)
        with self.sessions() as session:
            return [Intercept(call, task_id, pv) for call, task_id, pv in session.execute(stmt).all()]

    def patch_reviews(self, *, tampering_only: bool = False, limit: int, offset: int = 0) -> list[EpisodeRow]:
        """Ended episodes whose final patch the guard found tampering or suspect, newest first.

        The review lives in the episode's details; ``patch_flag`` (``tampering`` | ``suspect``) is
        its one top-level key, so both SQLite and PostgreSQL filter on it without a JSON path.
        """
        flag = EpisodeRow.details["patch_flag"].as_string()
        stmt = select(EpisodeRow).where(flag.is_not(None))
        if tampering_only:
            stmt = stmt.where(flag == "tampering")
        stmt = stmt.order_by(EpisodeRow.finished_at.desc(), EpisodeRow.id).limit(limit).offset(offset)
        with self.sessions() as session:
            return list(session.scalars(stmt).all())

    def intercept_stats(self, *, since: datetime | None = None) -> InterceptStats:
        intercepted = func.sum(case((ToolCallRow.action != "allow", 1), else_=0))
        base = select(func.count(ToolCallRow.id), intercepted).join(
            EpisodeRow, ToolCallRow.episode_id == EpisodeRow.id
        )
        if since is not None:
            base = base.where(ToolCallRow.created_at >= since)
        with self.sessions() as session:
            total, n_intercepted = session.execute(base).one()
            total = int(total or 0)
            per_category = session.execute(
                base.add_columns(ToolCallRow.category)
                .where(ToolCallRow.action != "allow")
                .group_by(ToolCallRow.category)
                .order_by(ToolCallRow.category)
            ).all()
            per_policy = session.execute(
                base.add_columns(EpisodeRow.policy_version)
                .group_by(EpisodeRow.policy_version)
                .order_by(EpisodeRow.policy_version)
            ).all()
        return InterceptStats(
            total_calls=total,
            intercepted=int(n_intercepted or 0),
            by_category=[RateRow(cat, total, int(n)) for _, n, cat in per_category],
            by_policy_version=[RateRow(pv, int(c), int(n or 0)) for c, n, pv in per_policy],
        )

    # -- export -----------------------------------------------------------------------------------

    def iter_export_rows(
        self, statuses: Sequence[str] = (EpisodeStatus.FINISHED.value,)
    ) -> Iterator[dict[str, Any]]:
        """One dict per sub-trajectory of episodes in ``statuses``, in the export layout."""
        intercepts = (
            select(func.count(ToolCallRow.id))
            .where(ToolCallRow.episode_id == EpisodeRow.id, ToolCallRow.action != "allow")
            .correlate(EpisodeRow)
            .scalar_subquery()
        )
        stmt = (
            select(
                SubTrajectoryRow,
                EpisodeRow.task_id,
                EpisodeRow.policy_version,
                EpisodeRow.reward,
                EpisodeRow.status,
                intercepts,
            )
            .join(EpisodeRow, SubTrajectoryRow.episode_id == EpisodeRow.id)
            .where(EpisodeRow.status.in_(list(statuses)))
            .order_by(EpisodeRow.created_at, EpisodeRow.id, SubTrajectoryRow.index)
        )
        with self.sessions() as session:
            for sub, task_id, pv, reward, status, n_intercepts in session.execute(stmt).yield_per(256):
                yield {
                    "episode_id": sub.episode_id,
                    "sub_index": sub.index,
                    "task": task_id,
                    "policy_version": sub.policy_version or pv,
                    "token_ids": decode_token_ids(sub.token_ids).tolist(),
                    "action_mask": decode_action_mask(sub.action_mask).tolist(),
                    "logprobs": decode_logprobs(sub.logprobs).tolist(),
                    "reward": reward,
                    "intercepts": int(n_intercepts),
                    "status": status,
                    "version_spans": [
                        {"start": int(start), "end": int(end), "version": str(version)}
                        for start, end, version in sub.version_spans
                    ]
                    if sub.version_spans
                    else None,
                }
