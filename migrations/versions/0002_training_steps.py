"""Training steps: the trainer's committed checkpoints (one row per step of a run).

The trainer inserts a row and marks the step's sub-trajectories consumed in one transaction, so a
crash between training and commit leaves the data unconsumed and the old checkpoint current.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.types import UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "training_steps",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run", sa.String(200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("policy_version", sa.String(200), nullable=False),
        sa.Column("checkpoint_path", sa.Text(), nullable=False),
        sa.Column("num_sub_trajectories", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("run", "step", name="uq_training_steps_run_step"),
    )
    op.create_index("ix_training_steps_run", "training_steps", ["run"])


def downgrade() -> None:
    op.drop_index("ix_training_steps_run", table_name="training_steps")
    op.drop_table("training_steps")
