"""work_items: the failed items in the list's order, so that `phase=failed` reads its
page instead of walking the newest items of a long history (few of them failed).

Built CONCURRENTLY on PostgreSQL: work_items holds every item a deployment keeps, and a
plain CREATE INDEX would block its writes for as long as the build takes.

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FAILED = sa.text("phase = 'failed'")


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_work_items_failed_newest",
            "work_items",
            ["created_at", "id"],
            sqlite_where=_FAILED,
            postgresql_where=_FAILED,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "ix_work_items_failed_newest", table_name="work_items", postgresql_concurrently=True
        )
