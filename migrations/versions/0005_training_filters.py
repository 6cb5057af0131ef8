"""The trainer's data filters: the run an episode belongs to, and why an episode is unusable.

``episodes.run`` lets a trainer read its own rollout round (a run or experiment name, filtered with
the policy version) instead of the oldest unconsumed episodes of a shared store; ``episodes.
unusable_reason`` marks an episode the trainer will never train on (infrastructure error, broken
chain of sub-trajectories, too long), so it is not read again at every step. Both nullable.

Revision ID: 0005_training_filters
Revises: 0004_22_proxy_turns
Create Date: 2026-12-10
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_training_filters"
down_revision: str | None = "0004_22_proxy_turns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.add_column(sa.Column("run", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("unusable_reason", sa.String(length=200), nullable=True))
        batch.create_index("ix_episodes_run", ["run"])


def downgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.drop_index("ix_episodes_run")
        batch.drop_column("unusable_reason")
        batch.drop_column("run")
