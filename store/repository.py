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
from sqlalchemy.orm import Session, aliased, selectinload, sessionmaker

from store.codec import decode_action_mask, decode_logprobs, decode_token_ids
from store.engine import check_connection, make_engine, make_session_factory, sqlite_path
from store.errors import StoreError
from store.leases import LeaseQueries
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
class EpisodeFilter:
    """Filters of the episode list; ``None`` means no filter."""

    status: str | None = None
    task: str | None = None
    policy_version: str | None = None
    since: datetime | None = None
    trainable: bool | None = None  # True: has sub-trajectories; False: has none (audit-only)
    id_prefix: str | None = None


@dataclass(frozen=True)
class EpisodeListing:
    """One episode of the list, with its counts (no children loaded)."""

    episode: EpisodeRow
    intercepts: int
    sub_trajectories: int


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


class Store(TrainingQueries, LeaseQueries):
    """The trajectory store over one engine; thread-safe (one short session per method)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions: sessionmaker[Session] = make_session_factory(engine)

    @classmethod
    def from_url(cls, url: str) -> Store:
        return cls(make_engine(url))

    @classmethod
    def open(cls, url: str, *, must_exist: bool = False) -> Store:
        """A store whose database answers now (one StoreError otherwise). ``must_exist``: a SQLite
        file that is not there is an error, not a new empty database (for commands that read)."""
        path = sqlite_path(url)
        if must_exist and path is not None and not path.is_file():
            raise StoreError(f"no database at {str(path)!r}")
        store = cls.from_url(url)
        try:
            check_connection(store.engine)
        except StoreError:
            store.close()
            raise
        return store

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
        holder: str | None = None,
    ) -> bool:
        """Move a running episode to a final status; False when it was no longer running or, given
        ``holder``, when that lease holder no longer holds it (another gateway claimed it)."""
        values: dict[str, Any] = {"status": status.value, "reward": reward, "finished_at": at or utcnow()}
        if details is not None:
            values["details"] = details
        conditions = [EpisodeRow.id == episode_id, EpisodeRow.status == EpisodeStatus.RUNNING.value]
        if holder is not None:
            conditions.append(EpisodeRow.lease_holder == holder)
        with self.sessions.begin() as session:
            result = session.execute(update(EpisodeRow).where(*conditions).values(**values))
            return result.rowcount == 1

    def episode(self, episode_id: str, *, with_children: bool = False) -> EpisodeRow | None:
        with self.sessions() as session:
            stmt = select(EpisodeRow).where(EpisodeRow.id == episode_id)
            if with_children:
                stmt = stmt.options(
                    selectinload(EpisodeRow.tool_calls), selectinload(EpisodeRow.sub_trajectories)
                )
            return session.scalars(stmt).one_or_none()

    def list_episodes(self, filters: EpisodeFilter, *, limit: int, offset: int = 0) -> list[EpisodeListing]:
        """Episodes newest first, with intercept and sub-trajectory counts."""
        intercepts = (
            select(func.count(ToolCallRow.id))
            .where(ToolCallRow.episode_id == EpisodeRow.id, ToolCallRow.action != "allow")
            .correlate(EpisodeRow)
            .scalar_subquery()
        )
        rows = (
            select(func.count(SubTrajectoryRow.id))
            .where(SubTrajectoryRow.episode_id == EpisodeRow.id)
            .correlate(EpisodeRow)
            .scalar_subquery()
        )
        stmt = select(EpisodeRow, intercepts, rows).order_by(EpisodeRow.created_at.desc(), EpisodeRow.id)
        if filters.status is not None:
            stmt = stmt.where(EpisodeRow.status == filters.status)
        if filters.task is not None:
            stmt = stmt.where(EpisodeRow.task_id == filters.task)
        if filters.policy_version is not None:
            stmt = stmt.where(EpisodeRow.policy_version == filters.policy_version)
        if filters.since is not None:
            stmt = stmt.where(EpisodeRow.created_at >= filters.since)
        if filters.id_prefix is not None:
            stmt = stmt.where(EpisodeRow.id.startswith(filters.id_prefix, autoescape=True))
        if filters.trainable is not None:
            has_rows = EpisodeRow.id.in_(select(SubTrajectoryRow.episode_id))
            stmt = stmt.where(has_rows if filters.trainable else ~has_rows)
        with self.sessions() as session:
            result = session.execute(stmt.limit(limit).offset(offset)).all()
            return [EpisodeListing(e, int(n or 0), int(r or 0)) for e, n, r in result]

    def episode_id_for_token_hash(self, token_hash: str) -> str | None:
        with self.sessions() as session:
            return session.scalar(select(EpisodeRow.id).where(EpisodeRow.agent_token_hash == token_hash))

    # -- sub-trajectories (written by the rollout runner, read by the trainer) ------------------

    def add_sub_trajectory(self, row: SubTrajectoryRow) -> None:
        self.add_sub_trajectories([row])

    def add_sub_trajectories(self, rows: Sequence[SubTrajectoryRow]) -> None:
        """Insert rows in one transaction: all of them land or none does."""
        try:
            with self.sessions.begin() as session:
                session.add_all(rows)
        except IntegrityError as exc:
            first = rows[0] if rows else None
            where = f" of episode {first.episode_id}" if first else ""
            raise DuplicateError(f"a sub-trajectory index{where} already exists") from exc

    def sub_trajectory_count(self, episode_id: str) -> int:
        with self.sessions() as session:
            count = session.scalar(
                select(func.count(SubTrajectoryRow.id)).where(SubTrajectoryRow.episode_id == episode_id)
            )
            return int(count or 0)

    def calls_of(self, episode_id: str) -> list[ToolCallRow]:
        """An episode's tool calls in order (without its sub-trajectories)."""
        with self.sessions() as session:
            return list(
                session.scalars(
                    select(ToolCallRow).where(ToolCallRow.episode_id == episode_id).order_by(ToolCallRow.seq)
                )
            )

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
        """One dict per sub-trajectory of episodes in ``statuses``, in the export layout.

        Beside the row's own arrays: the episode's reward, status, intercepts (calls decoyed or
        flagged), decoyed calls (what an intercept penalty charges) and end reason, whether
        the row is its episode's last (``is_last``: where an outcome reward lands), the chat
        ``messages`` the model proxy kept, and the proxy's drift count and model (null otherwise)."""
        intercepts = (
            select(func.count(ToolCallRow.id))
            .where(ToolCallRow.episode_id == EpisodeRow.id, ToolCallRow.action != "allow")
            .correlate(EpisodeRow)
            .scalar_subquery()
        )
        decoyed = (
            select(func.count(ToolCallRow.id))
            .where(ToolCallRow.episode_id == EpisodeRow.id, ToolCallRow.was_decoy.is_(True))
            .correlate(EpisodeRow)
            .scalar_subquery()
        )
        last = aliased(SubTrajectoryRow)
        last_index = (
            select(func.max(last.index)).where(last.episode_id == EpisodeRow.id).correlate(EpisodeRow)
        ).scalar_subquery()
        stmt = (
            select(
                SubTrajectoryRow,
                EpisodeRow.task_id,
                EpisodeRow.policy_version,
                EpisodeRow.reward,
                EpisodeRow.status,
                EpisodeRow.details,
                intercepts,
                decoyed,
                last_index,
            )
            .join(EpisodeRow, SubTrajectoryRow.episode_id == EpisodeRow.id)
            .where(EpisodeRow.status.in_(list(statuses)))
            .order_by(EpisodeRow.created_at, EpisodeRow.id, SubTrajectoryRow.index)
        )
        with self.sessions() as session:
            for sub, task_id, pv, reward, status, details, n_intercepts, n_decoyed, last_idx in (
                session.execute(stmt).yield_per(256)
            ):
                proxy = (details or {}).get("model_proxy") or {}
                yield {
                    "episode_id": sub.episode_id,
                    "sub_index": sub.index,
                    "is_last": sub.index == last_idx,
                    "task": task_id,
                    "policy_version": sub.policy_version or pv,
                    "token_ids": decode_token_ids(sub.token_ids).tolist(),
                    "action_mask": decode_action_mask(sub.action_mask).tolist(),
                    "logprobs": decode_logprobs(sub.logprobs).tolist(),
                    "reward": reward,
                    "intercepts": int(n_intercepts),
                    "decoyed_calls": int(n_decoyed),
                    "status": status,
                    "end_reason": (details or {}).get("end_reason"),
                    "trainable": bool(sub.trainable),
                    "drift": proxy.get("drift"),
                    "model": proxy.get("model"),
                    "tokenizer": proxy.get("tokenizer"),
                    "messages": sub.messages,
                    "version_spans": [
                        {"start": int(start), "end": int(end), "version": str(version)}
                        for start, end, version in sub.version_spans
                    ]
                    if sub.version_spans
                    else None,
                }

    def ended_without_rows(self, statuses: Sequence[str]) -> list[tuple[str, str]]:
        """Episodes in ``statuses`` that hold no sub-trajectory, with why (``details["audit_only"]``, or
        empty): what an export leaves out and should say so."""
        has_rows = select(SubTrajectoryRow.episode_id)
        stmt = (
            select(EpisodeRow.id, EpisodeRow.details)
            .where(EpisodeRow.status.in_(list(statuses)), EpisodeRow.id.not_in(has_rows))
            .order_by(EpisodeRow.created_at)
        )
        with self.sessions() as session:
            return [(i, str((d or {}).get("audit_only") or "")) for i, d in session.execute(stmt).all()]
