"""audit_log: S3 archival state per row (archived_at, archive_claimed_until) and the
partial index of rows not archived yet, which the archiver reads in id order.

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNARCHIVED = sa.text("archived_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("archive_claimed_until", sa.DateTime(timezone=True), nullable=True)
        )
    op.create_index(
        "ix_audit_log_unarchived",
        "audit_log",
        ["id"],
        unique=False,
        sqlite_where=UNARCHIVED,
        postgresql_where=UNARCHIVED,
    )


def downgrade() -> None:
    op.drop_index("ix_audit_log_unarchived", table_name="audit_log")
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_column("archive_claimed_until")
        batch.drop_column("archived_at")
