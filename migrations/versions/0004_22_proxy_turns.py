"""What the recording model proxy keeps beside a sub-trajectory's tokens (issue 22).

``messages``: the chat conversation the sub-trajectory holds (the harness's last request and the
reply), for SFT/DPO exports; ``turns``: each model turn's token positions, text, tool calls and the
gateway calls they became, for the episode view. Both nullable: rows uploaded by rlguard's own
runner, and rows from before this revision, have neither.

Revision ID: 0004_22_proxy_turns
Revises: 0003_async_opd
Create Date: 2026-12-20
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_22_proxy_turns"
down_revision: str | None = "0003_async_opd"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sub_trajectories") as batch:
        batch.add_column(sa.Column("messages", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("turns", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sub_trajectories") as batch:
        batch.drop_column("turns")
        batch.drop_column("messages")
