"""Episode leases and engines: many gateways on one database, sandboxes on many engines (issue 24).

Every running episode is owned by one gateway process: ``owner_instance`` (its ``RLGUARD_INSTANCE``),
``owner_url`` (where calls for it must go), ``lease_holder`` (random per process) and
``lease_expires_at`` (renewed by the holder). ``sandbox_engine`` names the engine of the fleet that
holds its sandbox. Rows from before this revision have no lease: they count as expired long ago.

Revision ID: 0006_leases
Revises: 0005_training_filters
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.types import UTCDateTime

revision: str = "0006_leases"
down_revision: str | None = "0005_training_filters"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.add_column(sa.Column("sandbox_engine", sa.String(200), nullable=True))
        batch.add_column(sa.Column("owner_instance", sa.String(200), nullable=True))
        batch.add_column(sa.Column("owner_url", sa.String(500), nullable=True))
        batch.add_column(sa.Column("lease_holder", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", UTCDateTime(), nullable=True))
    op.create_index("ix_episodes_lease_holder", "episodes", ["lease_holder"])
    op.create_index("ix_episodes_status_lease", "episodes", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_episodes_status_lease", table_name="episodes")
    op.drop_index("ix_episodes_lease_holder", table_name="episodes")
    with op.batch_alter_table("episodes") as batch:
        for column in ("lease_expires_at", "lease_holder", "owner_url", "owner_instance", "sandbox_engine"):
            batch.drop_column(column)
