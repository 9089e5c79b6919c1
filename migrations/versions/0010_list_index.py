"""work_items: an index in the API list's order (created_at, id), so that a page and
its cursor read the page's rows instead of sorting every item.

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_work_items_newest", "work_items", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_work_items_newest", table_name="work_items")
