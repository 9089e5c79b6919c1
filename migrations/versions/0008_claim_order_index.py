"""work_items: the claimable index follows the claim's order (ready since, then seq),
so a claim reads the items it takes instead of sorting every admitted item.

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLAIMABLE = sa.text("admission = 'admitted' AND phase = 'active'")


def upgrade() -> None:
    op.drop_index("ix_work_items_claimable", table_name="work_items")
    op.create_index(
        "ix_work_items_claimable",
        "work_items",
        [sa.text("coalesce(run_after, admitted_at)"), "seq"],
        sqlite_where=CLAIMABLE,
        postgresql_where=CLAIMABLE,
    )


def downgrade() -> None:
    op.drop_index("ix_work_items_claimable", table_name="work_items")
    op.create_index(
        "ix_work_items_claimable",
        "work_items",
        ["seq"],
        sqlite_where=CLAIMABLE,
        postgresql_where=CLAIMABLE,
    )
