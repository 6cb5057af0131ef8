"""Per-span policy versions of a sub-trajectory (asynchronous rollout with partial rollouts).

An episode in flight while the trainer pushes new weights goes on with the new ones, so one
sub-trajectory may hold tokens of several policy versions; ``version_spans`` records
``[start, end, version]`` per generated span. Nullable: older rows keep their single
``policy_version``.

Revision ID: 0003_async_opd
Revises: 0002
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_async_opd"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sub_trajectories") as batch:
        batch.add_column(sa.Column("version_spans", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sub_trajectories") as batch:
        batch.drop_column("version_spans")
