"""audit_log: an index on (work_item_id, id) for an item's history, newest first.

It replaces the index on work_item_id alone, whose every query it also serves.

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_audit_log_work_item_id_id", "audit_log", ["work_item_id", "id"], unique=False
    )
    op.drop_index("ix_audit_log_work_item_id", table_name="audit_log")


def downgrade() -> None:
    op.create_index("ix_audit_log_work_item_id", "audit_log", ["work_item_id"], unique=False)
    op.drop_index("ix_audit_log_work_item_id_id", table_name="audit_log")
