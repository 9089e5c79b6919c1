"""The mr type: an index on mr_details.mr_iid (events resolve by project and iid).

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_mr_details_mr_iid", "mr_details", ["mr_iid"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_mr_details_mr_iid", table_name="mr_details")
