"""The trajectory store's tables as SQLAlchemy 2 typed models.

Column names are a contract: the trainer reads ``sub_trajectories`` and marks rows consumed, the
audit reads ``tool_calls``. The schema itself is created only by the Alembic migrations in
``migrations/``; these models must match them (a test compares the two).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from store.types import NulSafeJSON, NulSafeText, UTCDateTime


def utcnow() -> datetime:
    return datetime.now(UTC)


class EpisodeStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    #: The infrastructure failed under the episode (its engine stopped answering, its sandbox was
    #: lost with its gateway): recorded, never trained, the rollout side may run the task again.
    INFRA_ERROR = "infra_error"


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: NulSafeJSON,
        bytes: LargeBinary,
    }


class TaskRow(Base):
    """A task an episode ran: ``id`` is ``<suite>/<task_id>``; a snapshot, the suite files stay the truth."""

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    suite: Mapped[str] = mapped_column(String(100))
    instructions: Mapped[str] = mapped_column(NulSafeText, default="")
    image: Mapped[str] = mapped_column(String(300), default="")
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class EpisodeRow(Base):
    """One agent episode: its task, the policy that ran it, how it ended and its reward.

    A running episode is owned by one gateway process under a lease (migration 0006): the owner's
    instance name and URL, a random per-process ``lease_holder`` and ``lease_expires_at``, which
    the holder renews while it runs the episode. Only the holder calls, finishes or ends it; when
    the lease has lapsed another gateway may claim it and end it (``store.leases``).
    """

    __tablename__ = "episodes"
    __table_args__ = (
        UniqueConstraint("agent_token_hash", name="uq_episodes_agent_token_hash"),
        Index("ix_episodes_status_lease", "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), index=True)
    policy_version: Mapped[str | None] = mapped_column(String(200), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True, default=EpisodeStatus.RUNNING)
    reward: Mapped[float | None] = mapped_column(Float)
    agent_token_hash: Mapped[str] = mapped_column(String(64))
    sandbox_id: Mapped[str | None] = mapped_column(String(100))
    num_calls: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_activity_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The training run (or experiment) whose rollout produced the episode, so a trainer takes its own
    # round and not whatever is oldest in a shared store (migration 0005; None: not recorded).
    run: Mapped[str | None] = mapped_column(String(200), index=True)
    # Why the trainer will never train on it (infrastructure error, broken chain of sub-trajectories,
    # too long, ...): set once by the trainer's data loader, so it is not read again and again.
    unusable_reason: Mapped[str | None] = mapped_column(String(200))
    # which engine of the fleet holds the sandbox (migration 0006; None on older rows)
    sandbox_engine: Mapped[str | None] = mapped_column(String(200))
    owner_instance: Mapped[str | None] = mapped_column(String(200))
    owner_url: Mapped[str | None] = mapped_column(String(500))
    lease_holder: Mapped[str | None] = mapped_column(String(64), index=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column()

    tool_calls: Mapped[list[ToolCallRow]] = relationship(
        back_populates="episode", order_by="ToolCallRow.seq", lazy="raise"
    )
    sub_trajectories: Mapped[list[SubTrajectoryRow]] = relationship(
        back_populates="episode", order_by="SubTrajectoryRow.index", lazy="raise"
    )


class SubTrajectoryRow(Base):
    """One sub-trajectory (a new one starts at each compaction), token-level, binary-packed.

    ``token_ids`` int32 LE, ``action_mask`` uint8, ``logprobs`` float32 LE (see ``store.codec``);
    ``consumed_at``/``consumed_by_step`` are set by the trainer when it trains on the row (or drops
    it as too stale: ``consumed_by_step`` is then the step that dropped it).
    """

    __tablename__ = "sub_trajectories"
    __table_args__ = (
        UniqueConstraint("episode_id", "index", name="uq_sub_trajectories_episode_index"),
        Index("ix_sub_trajectories_unconsumed", "consumed_at", "trainable"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ForeignKey("episodes.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    num_tokens: Mapped[int] = mapped_column(Integer)
    token_ids: Mapped[bytes] = mapped_column()
    action_mask: Mapped[bytes] = mapped_column()
    logprobs: Mapped[bytes] = mapped_column()
    policy_version: Mapped[str | None] = mapped_column(String(200))
    # [[start, end, version], ...]: which policy version generated each token span (migration 0003);
    # None on rows from before it (the row's policy_version then covers every generated token).
    version_spans: Mapped[list[Any] | None] = mapped_column(NulSafeJSON)
    # written by the gateway's model proxy (migration 0004): the chat conversation the row holds and
    # each model turn's positions, text and tool calls; None on rows the rollout runner uploads.
    messages: Mapped[list[Any] | None] = mapped_column(NulSafeJSON)
    turns: Mapped[list[Any] | None] = mapped_column(NulSafeJSON)
    trainable: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    consumed_at: Mapped[datetime | None] = mapped_column()
    consumed_by_step: Mapped[int | None] = mapped_column(Integer)

    episode: Mapped[EpisodeRow] = relationship(back_populates="sub_trajectories", lazy="raise")


class ToolCallRow(Base):
    """One tool call with its guard verdict and the exact answer the agent got (real or decoy)."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        UniqueConstraint("episode_id", "seq", name="uq_tool_calls_episode_seq"),
        Index("ix_tool_calls_action_created", "action", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    episode_id: Mapped[str] = mapped_column(ForeignKey("episodes.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    tool: Mapped[str] = mapped_column(String(32))
    arguments: Mapped[dict[str, Any]] = mapped_column()
    normalized: Mapped[str] = mapped_column(NulSafeText, default="")
    action: Mapped[str] = mapped_column(String(16))
    stage: Mapped[str | None] = mapped_column(String(16))
    rule_id: Mapped[str | None] = mapped_column(String(200))
    category: Mapped[str | None] = mapped_column(String(64), index=True)
    confidence: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(NulSafeText, default="")
    answer_output: Mapped[str] = mapped_column(NulSafeText)
    answer_exit_code: Mapped[int] = mapped_column(Integer)
    answer_truncated: Mapped[bool] = mapped_column(Boolean)
    was_decoy: Mapped[bool] = mapped_column(Boolean, index=True)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    timed_out: Mapped[bool] = mapped_column(Boolean, default=False)
    guard_ms: Mapped[float] = mapped_column(Float, default=0.0)
    exec_ms: Mapped[float] = mapped_column(Float, default=0.0)
    total_ms: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)

    episode: Mapped[EpisodeRow] = relationship(back_populates="tool_calls", lazy="raise")

    @property
    def intercepted(self) -> bool:
        return self.action != "allow"


class TrainingStepRow(Base):
    """One committed trainer step: where its checkpoint is. Written by ``trainer.data`` in the same
    transaction that marks the step's sub-trajectories consumed (their ``consumed_by_step`` is this
    row's ``id``), so the newest row of a run is the checkpoint to resume from (migration 0002)."""

    __tablename__ = "training_steps"
    __table_args__ = (UniqueConstraint("run", "step", name="uq_training_steps_run_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run: Mapped[str] = mapped_column(String(200), index=True)
    step: Mapped[int] = mapped_column(Integer)
    policy_version: Mapped[str] = mapped_column(String(200))
    checkpoint_path: Mapped[str] = mapped_column(NulSafeText)
    num_sub_trajectories: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
