"""Initial schema: tasks, episodes, sub_trajectories, tool_calls.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.types import UTCDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("suite", sa.String(100), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=False),
        sa.Column("image", sa.String(300), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "episodes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.String(200), sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("policy_version", sa.String(200), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("agent_token_hash", sa.String(64), nullable=False),
        sa.Column("sandbox_id", sa.String(100), nullable=True),
        sa.Column("num_calls", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("last_activity_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.UniqueConstraint("agent_token_hash", name="uq_episodes_agent_token_hash"),
    )
    op.create_index("ix_episodes_task_id", "episodes", ["task_id"])
    op.create_index("ix_episodes_policy_version", "episodes", ["policy_version"])
    op.create_index("ix_episodes_status", "episodes", ["status"])
    op.create_table(
        "sub_trajectories",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("episode_id", sa.String(64), sa.ForeignKey("episodes.id"), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("num_tokens", sa.Integer(), nullable=False),
        sa.Column("token_ids", sa.LargeBinary(), nullable=False),
        sa.Column("action_mask", sa.LargeBinary(), nullable=False),
        sa.Column("logprobs", sa.LargeBinary(), nullable=False),
        sa.Column("policy_version", sa.String(200), nullable=True),
        sa.Column("trainable", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("consumed_at", UTCDateTime(), nullable=True),
        sa.Column("consumed_by_step", sa.Integer(), nullable=True),
        sa.UniqueConstraint("episode_id", "index", name="uq_sub_trajectories_episode_index"),
    )
    op.create_index("ix_sub_trajectories_episode_id", "sub_trajectories", ["episode_id"])
    op.create_index("ix_sub_trajectories_unconsumed", "sub_trajectories", ["consumed_at", "trainable"])
    op.create_table(
        "tool_calls",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("episode_id", sa.String(64), sa.ForeignKey("episodes.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(32), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("normalized", sa.Text(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("stage", sa.String(16), nullable=True),
        sa.Column("rule_id", sa.String(200), nullable=True),
        sa.Column("category", sa.String(64), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("answer_output", sa.Text(), nullable=False),
        sa.Column("answer_exit_code", sa.Integer(), nullable=False),
        sa.Column("answer_truncated", sa.Boolean(), nullable=False),
        sa.Column("was_decoy", sa.Boolean(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("timed_out", sa.Boolean(), nullable=False),
        sa.Column("guard_ms", sa.Float(), nullable=False),
        sa.Column("exec_ms", sa.Float(), nullable=False),
        sa.Column("total_ms", sa.Float(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("episode_id", "seq", name="uq_tool_calls_episode_seq"),
    )
    op.create_index("ix_tool_calls_episode_id", "tool_calls", ["episode_id"])
    op.create_index("ix_tool_calls_category", "tool_calls", ["category"])
    op.create_index("ix_tool_calls_was_decoy", "tool_calls", ["was_decoy"])
    op.create_index("ix_tool_calls_created_at", "tool_calls", ["created_at"])
    op.create_index("ix_tool_calls_action_created", "tool_calls", ["action", "created_at"])


def downgrade() -> None:
    op.drop_table("tool_calls")
    op.drop_table("sub_trajectories")
    op.drop_table("episodes")
    op.drop_table("tasks")
